package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/record"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Verifier checks fencing tokens against the lock records that Clients
// keep in etcd, for resources that receive tokens from outside their
// process: a token is genuine when, at the time of the check, its lock's
// current holder (the record at the head of the lock's queue, the one
// with the lowest creation revision) was created at exactly the token's
// revision. A token that some acquisition was issued but whose lease has
// since ended is not genuine any more, nor is a waiter's revision, another
// lock's, one from another etcd cluster, or one no acquisition made.
//
// A Verifier satisfies guard.Verifier and sqlguard.Verifier. Each Verify
// is one linearizable etcd range read of the lock's queue (two when the
// queue's first key is a lock-delay marker, see WithLockDelay); guard and
// sqlguard call it only for tokens that would raise a mark. The answer
// holds at the moment of the read: the holder may lose the lock right
// after, so a verified token is one that was current, not one that still
// is (the resource's mark then refuses the superseded holder once its
// successor has written).
//
// A Verifier does not own its etcd client. It is safe for concurrent use.
type Verifier struct {
	etcd   *clientv3.Client
	prefix string
}

// unverified is Verify's refusal of t for reason, a *fence.RefusedError
// with Outcome fence.Unverified (matching fence.ErrUnverified) whose Err
// says why, without naming the current holder's revision, and wraps
// cause when there is one (fence.ErrInvalid for a revision <= 0,
// ErrInvalidName for a lock name no Client accepts).
func unverified(t fence.Token, reason string, cause error) error {
	detail := errors.New("lease: " + reason)
	if cause != nil {
		detail = fmt.Errorf("lease: %s: %w", reason, cause)
	}
	return &fence.RefusedError{Outcome: fence.Unverified, Lock: t.Lock, Token: t, Err: detail}
}

// NewVerifier returns a Verifier of the records that Clients keep under
// prefix through cli: the prefix given to WithPrefix, or DefaultPrefix. A
// "/" is appended when missing, as WithPrefix does.
func NewVerifier(cli *clientv3.Client, prefix string) (*Verifier, error) {
	if cli == nil {
		return nil, errors.New("lease: nil etcd client")
	}
	prefix, err := record.Prefix(prefix)
	if err != nil {
		return nil, err
	}
	return &Verifier{etcd: cli, prefix: prefix}, nil
}

// Verifier returns a Verifier of the records of c's prefix, through c's
// etcd client. It stays usable after c is closed, as long as the etcd
// client is open.
func (c *Client) Verifier() *Verifier {
	return &Verifier{etcd: c.etcd, prefix: c.cfg.prefix}
}

// Verify returns nil when t is the fencing token of its lock's current
// holder, a *fence.RefusedError with Outcome fence.Unverified (matching
// fence.ErrUnverified; its Err says why) when it is
// not, and another error, matching neither, when it cannot tell: etcd
// unreachable, permission denied, or ctx ended (ctx.Err() stays
// matchable). Invalid tokens are refused without a request.
func (v *Verifier) Verify(ctx context.Context, t fence.Token) error {
	_, _, err := v.check(ctx, t)
	return err
}

// Condition verifies t as Verify does and, when it is genuine, also
// returns a comparison that holds in a Txn of the same etcd cluster as
// long as t's holder still holds the lock (its record, created at t's
// revision, still exists: no record can join the queue ahead of it), and
// the ID of that cluster. A store of marks in the same cluster (package
// guard/etcdstore) puts it in the Txn that raises a mark, so that the
// check and the advance are one atomic step.
func (v *Verifier) Condition(ctx context.Context, t fence.Token) (cmp clientv3.Cmp, clusterID uint64, err error) {
	key, clusterID, err := v.check(ctx, t)
	if err != nil {
		return clientv3.Cmp{}, 0, err
	}
	return clientv3.Compare(clientv3.CreateRevision(key), "=", t.Revision), clusterID, nil
}

// check is Verify, returning the holder's record key and the cluster ID
// for a genuine token.
func (v *Verifier) check(ctx context.Context, t fence.Token) (key string, clusterID uint64, err error) {
	if err := t.Validate(); err != nil {
		return "", 0, unverified(t, "invalid token", err)
	}
	if err := ValidateName(t.Lock); err != nil {
		return "", 0, unverified(t, "no lock has this name", err)
	}
	dir := record.Dir(v.prefix, t.Lock)
	resp, err := v.etcd.Get(ctx, dir, record.HeadRecord()...)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = errors.Join(cerr, err)
		}
		return "", 0, fmt.Errorf("lease: verify token: read queue: %w", err)
	}
	if t.Revision > resp.Header.Revision {
		return "", 0, unverified(t, "revision beyond the cluster's current revision", nil)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, unverified(t, "the lock has no holder", nil)
	}
	// A lock-delay marker never holds: the head is its record, if any.
	head, err := record.ResolveHead(ctx, v.etcd, resp.Kvs[0])
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("lease: verify token: read queue: %w", errors.Join(err, ctx.Err()))
	case head == nil:
		return "", 0, unverified(t, "the lock has no holder (it waits out a lock-delay)", nil)
	}
	if head.CreateRevision != t.Revision {
		return "", 0, unverified(t, "not the revision of the lock's current holder", nil)
	}
	if _, _, ok := record.DecodeValue(head.Value); !ok || record.DirOf(string(head.Key)) != dir {
		return "", 0, unverified(t, "the record at that revision is not a lock record", nil)
	}
	if k, _ := record.KindOf(string(head.Key)); k != record.Exclusive {
		// A semaphore permit or a read lock: held alongside others, so its
		// revision is no fencing token.
		return "", 0, unverified(t, "the record at that revision is a "+k.String()+", which has no fencing token", nil)
	}
	return string(head.Key), resp.Header.ClusterId, nil
}
