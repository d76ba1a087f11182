package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/lease/internal/resend"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Renew confirms the lease and extends it: one read checks that the record
// still has this acquisition's creation revision and owner token (it writes
// nothing, so a stale Renew can neither extend a newer holder nor
// re-create a missing record), then one keep-alive of the lease's session
// extends the validity of every lease on it from the moment it was sent
// (a keep-alive without a reply in time is resent, as a Release is).
//
// The Client renews its sessions in the background, so Renew is needed only
// to confirm ownership before a step that matters. Renew neither resolves
// nor forgets a Release or Reenter whose outcome is unknown: retry that
// call. Errors are as for Release; when the lease has already ended
// locally (Done is closed) Renew returns Err() even if the record is still
// there, because the Client gives such records up.
func (l *Lease) Renew(ctx context.Context) error {
	return l.traced(ctx, opRenew, l.renew)
}

func (l *Lease) renew(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	resp, err := l.c.etcd.Txn(ctx).Then(l.reads()...).Commit()
	if err := record.RPCError(err); errors.Is(err, ErrPermissionDenied) {
		l.logResult(opRenew, "denied", err)
		return opErr("renew", l.name, err)
	}
	if err != nil {
		l.logResult(opRenew, "unknown", err)
		return opErr("renew", l.name, unknown(ctx, err))
	}
	st := l.judge(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
	if st.err != nil {
		if l.lastRelease() {
			l.released() // the pending Release took effect; its retry returns nil
			return ErrReleased
		}
		l.lose(st.err)
		l.logResult(opRenew, outcomeLabel(st.err), st.err)
		return opErr("renew", l.name, st.err)
	}
	if err := l.Err(); err != nil {
		return err
	}
	ka, sent, err := l.keepAlive(ctx)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.c.endSession(l.sess, ErrSessionExpired)
		return l.Err()
	case err != nil:
		l.logResult(opRenew, "unknown", err)
		return opErr("renew", l.name, fmt.Errorf("keep-alive: %w", unknown(ctx, err)))
	}
	l.sess.extend(sent.Add(time.Duration(ka.TTL)*time.Second - l.sess.margin))
	l.logResult(opRenew, "done", nil)
	return nil
}

// keepAlive renews l's session once, resending a keep-alive that gets no
// reply within its own deadline as Release does (see resend.Pacer): one stuck
// at a follower that forwards it to a stalled leader would otherwise wait
// for etcd's request timeout. It returns the reply and when the try that
// got it was sent.
func (l *Lease) keepAlive(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, time.Time, error) {
	r := resend.New(l.sess.ttl, &l.c.lat.renew)
	for {
		d := r.Deadline()
		tctx, cancel := context.WithTimeout(ctx, d)
		sent := time.Now()
		// The session's lock-delay leases first, as in the background
		// renewals: each must outlast the session by its delay.
		var ka *clientv3.LeaseKeepAliveResponse
		err := l.c.renewShadows(tctx, l.sess)
		if err == nil {
			ka, err = l.c.etcd.KeepAliveOnce(tctx, l.sess.id)
		}
		cancel()
		switch {
		case err == nil:
			l.c.renewed(time.Since(sent))
			return ka, sent, nil
		case ctx.Err() == nil && tctx.Err() != nil:
			err = fmt.Errorf("%w within %v", errNoReply, d)
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(record.RPCError(err), ErrPermissionDenied) || !l.c.again(ctx, r) {
			return nil, sent, err
		}
	}
}
