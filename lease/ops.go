package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/lease/internal/resend"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pendingCall is a call whose reply was lost since the record was last
// confirmed, and what it would have stored. Every such call compared the
// record's mod revision as last confirmed, so at most one of them applied,
// and none can apply after any later change; which one did shows in the
// stored hold count and payload, which differ between calls of different
// kinds (a Release and a Reenter move the count in opposite directions, a
// Proclaim keeps it).
type pendingCall struct {
	op      opKind
	count   int // 0: the record deleted
	payload string
}

// lastRelease reports whether a pending Release would have deleted the
// record.
func (l *Lease) lastRelease() bool {
	for _, p := range l.pending {
		if p.count == 0 {
			return true
		}
	}
	return false
}

// maxAttempts bounds the transactions of one call: each failed compare
// resolves the pending calls, so a call needs at most two.
const maxAttempts = 3

// Release gives up one hold. At the last hold it deletes the record and the
// lease ends with ErrReleased; otherwise it stores the count minus one.
// Either way it is one transaction comparing this acquisition's owner token
// and the record's last confirmed version (its mod revision, which pins
// its creation revision).
//
// It returns nil when done; an error matching ErrNotOwner when another
// acquisition holds the lock now, or ErrNotFound when nobody does (it
// expired, was deleted, or was already released) — in both cases this
// holder had lost the lock, and the lease ends with a *LostError if it had
// not already. An error matching ErrOutcomeUnknown means no reply came to
// any try (a try without a reply in time is resent, for up to one TTL; see
// Leader failure in the package doc) before ctx ended: call Release again.
// That retry is safe whatever was called in between (Renew included) and
// never releases twice; if the record went meanwhile, the retry returns
// nil and Err is ErrReleased.
// Releasing a lease that was already released returns an error, never nil.
// A Release called after the lease ended otherwise (Done closed, with a
// *LostError) only cleans up: it returns nil when it deleted the record and
// learned so, and Err keeps the loss; after an unknown outcome its retry
// reports what it finds (ErrNotFound when the record has gone). If the
// lease ends on its own (validity deadline, session end) while its last
// Release is on its way, Err keeps that cause even when the Release then
// returns nil.
func (l *Lease) Release(ctx context.Context) error {
	return l.traced(ctx, opRelease, func(ctx context.Context) error { return l.change(ctx, opRelease, "") })
}

// Reenter adds one hold to the lease, atomically in etcd: one transaction
// comparing this acquisition's owner token, hold count and the record's last
// confirmed version (its mod revision, which pins its creation revision). Every
// Reenter needs its own Release. The fencing token does not change. Errors are
// as for Release: after one matching ErrOutcomeUnknown, call Reenter again; it
// will not add two holds. A Release called instead first finds out whether the
// Reenter applied (Holds reports it). On a lease that has ended, Reenter
// returns its Err (ErrReleased, ErrClosed or a *LostError) and sends nothing.
func (l *Lease) Reenter(ctx context.Context) error {
	return l.traced(ctx, opReenter, func(ctx context.Context) error { return l.change(ctx, opReenter, "") })
}

// change runs a Release, Reenter or Proclaim (op, storing payload). A try
// whose reply is lost (no reply within its deadline, or a failure in
// transit) is sent again at once, as the caller's own retry would be (see
// resend.Pacer): the lost-reply rules make that safe. The last unknown outcome
// is returned when ctx ends or the resends' time is up. Each try is up to
// maxAttempts attempts (see attempt), and conclude turns the last one's
// outcome into the call's result.
func (l *Lease) change(ctx context.Context, op opKind, payload string) error {
	if l == nil {
		return errNilLease
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	r := resend.New(l.sess.ttl, &l.c.lat.change)
	for try := 0; ; try++ {
		if done, err := l.afterEnd(op, try == 0); done {
			return err
		}
		d := r.Deadline()
		res := l.attempt(ctx, d, op, payload)
		for n := 1; res.out == outChanged && n < maxAttempts; n++ {
			res = l.attempt(ctx, d, op, payload)
		}
		if res.out != outUnknown || !l.c.again(ctx, r) {
			return l.conclude(op, res)
		}
		if l.c.log.Enabled(context.Background(), slog.LevelInfo) {
			l.c.log.LogAttrs(context.Background(), slog.LevelInfo, "lease "+op.String()+" resent",
				append(l.attrs(), slog.String("error", res.err.Error()))...)
		}
	}
}

// outcome is what one attempt of a change found.
type outcome uint8

const (
	outApplied        outcome = iota // this attempt's write applied
	outAppliedEarlier                // an earlier try of this call applied: this is its retry
	outGone                          // the record is gone at its holder's request (a Release of the last hold)
	outNotOwner                      // the record is not this acquisition's: the lease is lost (result.err says how)
	outUnknown                       // no reply: the write may or may not apply (result.err, ready to return)
	outDenied                        // etcd refused it: not applied (result.err)
	outChanged                       // the record changed under the call, and is read again: attempt again
)

// result is an attempt's outcome, and its error where the outcome has one.
type result struct {
	out outcome
	err error
}

// conclude ends a call of op whose last attempt found res, and returns the
// call's result.
func (l *Lease) conclude(op opKind, res result) error {
	switch res.out {
	case outApplied, outAppliedEarlier:
	case outGone:
		l.pending = nil
		l.released()
		if op != opRelease {
			return ErrReleased
		}
	case outUnknown:
		l.logResult(op, "unknown", res.err)
		return res.err
	case outDenied:
		l.logResult(op, "denied", res.err)
		return opErr(op.String(), l.name, res.err)
	case outNotOwner:
		l.lose(res.err)
		l.logResult(op, outcomeLabel(res.err), res.err)
		return opErr(op.String(), l.name, res.err)
	default: // outChanged, every attempt
		// Only someone writing this acquisition's own owner token could
		// keep changing the record under it.
		l.lose(ErrKeyOverwritten)
		l.logResult(op, "not_owner", ErrKeyOverwritten)
		return opErr(op.String(), l.name, fmt.Errorf("%w: %w", ErrNotOwner, ErrKeyOverwritten))
	}
	l.logResult(op, "done", nil)
	return nil
}

// afterEnd handles a call on a lease that has ended, before a try: done
// reports that there is nothing to send, and err is then the call's
// result. A Release of an ended lease still tries to clean up; only the
// first try of a call counts a duplicate Release.
func (l *Lease) afterEnd(op opKind, first bool) (done bool, err error) {
	switch err := l.Err(); {
	case err == nil:
	case errors.Is(err, ErrTransferred):
		// Handed on: the record is the successor's business now, or
		// being deleted in the background (see Term.Transfer).
		return true, opErr(op.String(), l.name, err)
	case err == ErrReleased && op == opRelease && l.lastRelease():
		// The record went while this Release's outcome was unknown: this
		// call is its retry.
		l.pending = nil
		l.logResult(op, "done", nil)
		return true, nil
	case op != opRelease:
		return true, err
	case err == ErrReleased && first:
		l.c.met.Duplicates.Inc()
	}
	return false, nil
}

// attempt sends one transaction of a call of op, giving etcd d to reply.
func (l *Lease) attempt(ctx context.Context, d time.Duration, op opKind, payload string) result {
	next := pendingCall{op: op, count: l.count + op.delta(), payload: l.payload}
	if op == opProclaim {
		next.payload = payload
	}
	last := next.count == 0
	write := clientv3.OpPut(l.key, record.EncodeValue(l.owner.Value(), next.count, next.payload), clientv3.WithIgnoreLease())
	// Whether a delete of the record seen after this call may be its
	// doing: not when the Client had already given the record up (seen
	// gone, or the lease ended) before it was sent.
	mayDelete := false
	ops := []clientv3.Op{write}
	if last {
		ops[0] = clientv3.OpDelete(l.key)
		if l.rec.mark != nil {
			ops = append(ops, clientv3.OpDelete(l.rec.mark.Key)) // a clean release: no delay
		}
		mayDelete = l.c.recs.startRelease(l)
	}
	resp, err := l.txnWithin(ctx, d, ops...)
	switch {
	case err != nil:
		return l.noReply(ctx, op, err, next, last && !mayDelete)
	case !resp.Succeeded:
		return l.explain(ctx, op, next)
	}
	// Nothing pending applied, and now none can.
	l.pending = nil
	if last {
		l.released()
	} else {
		l.confirm(next.count, next.payload, resp.Header.Revision)
		l.settleReleasing()
	}
	return result{out: outApplied}
}

// noReply judges an attempt that got no reply (err): refused, or of
// unknown outcome, in which case next is pending unless forget (a delete
// that cannot be this call's, see attempt) — or, when the watch saw the
// record deleted while this Release of the last hold was in flight, gone
// as asked.
func (l *Lease) noReply(ctx context.Context, op opKind, err error, next pendingCall, forget bool) result {
	if err := record.RPCError(err); errors.Is(err, ErrPermissionDenied) {
		l.settleReleasing() // refused: not applied
		return result{outDenied, err}
	}
	if !forget {
		l.pending = append(l.pending, next)
	}
	if l.settleReleasing() && l.lastRelease() {
		return result{out: outGone}
	}
	return result{outUnknown, opErr(op.String(), l.name, unknown(ctx, err))}
}

// explain reads why an attempt's compare failed, and what that means for
// next, the call it made. The reads are a request of their own because
// etcd charges for a transaction's unused branch, and a compare that fails
// is rare.
func (l *Lease) explain(ctx context.Context, op opKind, next pendingCall) result {
	resp, err := l.c.etcd.Txn(ctx).Then(l.reads()...).Commit()
	l.settleReleasing()
	if err != nil {
		// Still not applied, and nothing pending: a retry reads again.
		if err := record.RPCError(err); errors.Is(err, ErrPermissionDenied) {
			return result{outDenied, err}
		}
		return result{outUnknown, opErr(op.String(), l.name, unknown(ctx, record.RPCError(err)))}
	}
	st := l.judge(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
	if st.err != nil {
		if l.lastRelease() {
			return result{out: outGone} // an earlier Release of the last hold deleted it
		}
		return result{outNotOwner, st.err}
	}
	applied, ok := l.resolve(st)
	l.confirm(st.count, st.payload, st.modRev)
	l.pending = nil
	if ok && applied == next {
		return result{out: outAppliedEarlier}
	}
	return result{out: outChanged}
}

// resolve returns the pending call that applied, judging by what is
// stored.
func (l *Lease) resolve(st stored) (pendingCall, bool) {
	for _, p := range l.pending {
		if p.count == st.count && p.payload == st.payload {
			return p, true
		}
	}
	return pendingCall{}, false
}

// settleReleasing sets l's release state after a call: pending while a Release
// of the last hold has an unknown outcome, none otherwise. It reports
// whether the watch saw the record deleted meanwhile.
func (l *Lease) settleReleasing() (sawDelete bool) {
	return l.c.recs.settleRelease(l, l.lastRelease())
}

// reads are the reads that explain a failed compare: the record, and the
// head of the lock's queue.
func (l *Lease) reads() []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(l.key),
		clientv3.OpGet(record.DirOf(l.key), record.HeadKey()...),
	}
}

// txn runs ops in one transaction if the record is this acquisition's, as
// last confirmed: the same owner token, hold count and payload, and the
// same mod revision. A key's mod revision names the one write that made
// its current version, here this acquisition's own last confirmed write
// (or the record's creation), so it pins the creation revision too: a
// record deleted and written again, even with the same value, has another.
func (l *Lease) txn(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	return l.c.etcd.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(l.key), "=", l.modRev),
		clientv3.Compare(clientv3.Value(l.key), "=", record.EncodeValue(l.owner.Value(), l.count, l.payload)),
	).Then(ops...).Commit()
}

// txnWithin is txn with d for etcd to reply, within ctx. A try that got
// no reply in time fails with errNoReply, not with a ctx error, since
// ctx has not ended.
func (l *Lease) txnWithin(ctx context.Context, d time.Duration, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	sent := time.Now()
	resp, err := l.txn(tctx, ops...)
	if err == nil {
		resend.ObserveLatency(&l.c.lat.change, time.Since(sent))
	} else if ctx.Err() == nil && tctx.Err() != nil {
		err = fmt.Errorf("%w within %v", errNoReply, d)
	}
	return resp, err
}

// stored is what the reads found.
type stored struct {
	count   int
	payload string
	modRev  int64
	err     error // ErrNotOwner or ErrNotFound when the record is not this acquisition's
}

// judge explains the reads: ErrNotOwner when the record was overwritten or
// another acquisition holds the lock now, ErrNotFound when nobody does, or
// the stored hold count and mod revision when the record is ours.
func (l *Lease) judge(rec, head []*mvccpb.KeyValue) stored {
	if len(rec) == 0 {
		if len(head) > 0 && !l.ownMarker(head[0]) {
			return stored{err: ErrNotOwner}
		}
		return stored{err: ErrNotFound}
	}
	kv := rec[0]
	tok, n, payload, ok := record.Decode(kv.Value)
	if kv.CreateRevision != l.rev || !ok || tok != l.owner.Value() {
		return stored{err: ErrNotOwner}
	}
	return stored{count: n, payload: payload, modRev: kv.ModRevision}
}

// ownMarker reports whether kv, the head of the lock's queue, is l's own
// lock-delay marker: the lock is in l's delay, and nobody holds it.
func (l *Lease) ownMarker(kv *mvccpb.KeyValue) bool {
	return l.rec.mark != nil && string(kv.Key) == l.rec.mark.Key
}

func (l *Lease) logResult(op opKind, result string, err error) {
	name := op.String()
	l.c.met.Result(op.String(), result).Inc()
	level := slog.LevelInfo
	if op == opRenew && err == nil {
		level = slog.LevelDebug
	}
	if err != nil {
		level = slog.LevelWarn
	}
	if !l.c.log.Enabled(context.Background(), level) {
		return // the record's fields cost hashes
	}
	attrs := append(l.attrs(), logattr.Outcome(result))
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if op == opRelease && err == nil {
		attrs = append(attrs, slog.Duration("held", time.Since(l.acquired)))
	}
	l.c.log.LogAttrs(context.Background(), level, "lease "+name, attrs...)
}
