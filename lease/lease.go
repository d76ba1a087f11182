package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/owner"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errNilLease is returned by the methods of a nil *Lease.
var errNilLease = errors.New("lease: nil *Lease")

// Lease is one held acquisition of a lock: the only way to renew, reenter
// or release it. Every one of those is one etcd transaction that compares
// this acquisition's owner token and creation revision, so a holder that was
// superseded can never act on its successor's record.
//
// A Lease is safe for concurrent use; Renew, Reenter and Release are
// serialised. Its owner token never leaves it: String and logs show a digest.
type Lease struct {
	c        *Client
	name     string
	key      string
	owner    owner.Token
	rev      int64
	sess     *session
	acquired time.Time

	// Guarded by c.mu: a release is in flight, and the watch saw the
	// record deleted meanwhile.
	releasing, sawDelete bool

	opMu    sync.Mutex // serialises Renew, Reenter and Release
	count   int        // hold count believed stored; guarded by opMu
	pending *pending   // call whose outcome is unknown; guarded by opMu

	mu      sync.Mutex
	done    chan struct{}
	err     error
	cancels map[int]context.CancelCauseFunc
	nextID  int
}

// pending remembers a Reenter or Release whose reply was lost, so that
// retrying it does not apply it twice.
type pending struct {
	op            string
	before, after int // hold counts; after == 0 means the record was deleted
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Fence returns the fencing token of this acquisition: the lock's name and
// the creation revision of its record. Send it with every write to a
// resource the lock protects.
func (l *Lease) Fence() fence.Token { return fence.Token{Lock: l.name, Revision: l.rev} }

// OwnerDigest returns the digest of the owner token, as logs show it.
func (l *Lease) OwnerDigest() string { return l.owner.Digest() }

// Acquired returns when the lock was acquired.
func (l *Lease) Acquired() time.Time { return l.acquired }

// GoString is String, so that %#v does not print the owner token.
func (l *Lease) GoString() string { return l.String() }

// String describes the lease without revealing its owner token.
func (l *Lease) String() string {
	if l == nil {
		return "lease(nil)"
	}
	return fmt.Sprintf("lease(%q fence=%d owner=%s)", l.name, l.rev, l.owner.Digest())
}

// Done returns a channel closed when the lease ends: released, lost, or its
// Client closed. Stop every side effect of the critical section when it
// closes; Err says why. When renewals stop being confirmed, Done closes a
// safety margin before the server could expire the session, so before any
// other client can acquire the lock.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held. After Done closes it returns
// ErrReleased, ErrClosed, or a *LostError (matching ErrLost and its cause).
func (l *Lease) Err() error {
	if l == nil {
		return errNilLease
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Holds returns the hold count: 1 after Acquire, plus one per Reenter, minus
// one per Release.
func (l *Lease) Holds() int {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	return l.count
}

// Context returns a copy of parent that carries l (see FromContext) and is
// cancelled, with l.Err() as its cause, when the lease ends. Call the
// CancelFunc when the work is done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(NewContext(parent, l))
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		cancel(err)
		return ctx, func() { cancel(context.Canceled) }
	}
	if l.cancels == nil {
		l.cancels = map[int]context.CancelCauseFunc{}
	}
	id := l.nextID
	l.nextID++
	l.cancels[id] = cancel
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		delete(l.cancels, id)
		l.mu.Unlock()
		cancel(context.Canceled)
	}
}

// end ends the lease with err, once.
func (l *Lease) end(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	close(l.done)
	cancels := l.cancels
	l.cancels = nil
	l.mu.Unlock()
	for _, cancel := range cancels {
		cancel(err)
	}
	l.c.met.hold.Observe(time.Since(l.acquired).Seconds())
	if errors.Is(err, ErrLost) {
		l.c.met.losses.WithLabelValues(lossCause(err)).Inc()
		l.c.log.LogAttrs(context.Background(), slog.LevelWarn, "lease lost", append(l.attrs(),
			slog.String("cause", errors.Unwrap(err).Error()), slog.Duration("held", time.Since(l.acquired)))...)
	}
}

// lose ends the lease because a transaction found it no longer owns its
// record. When the record is gone (ErrNotFound) its key may be reused.
func (l *Lease) lose(cause error) {
	l.c.forget(l)
	if errors.Is(cause, ErrNotFound) {
		l.c.freeSlot(l.sess, l.key)
	}
	l.end(&LostError{Fence: l.Fence(), Cause: cause})
}

// attrs are the fields every record about this lease carries, the same as
// the "lease acquired" record's, so records join on them.
func (l *Lease) attrs() []slog.Attr {
	return []slog.Attr{logattr.Lock(l.name), slog.String("owner", l.owner.Digest()), logattr.Fence(l.rev)}
}

// forget stops the watch from tracking l.
func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	if c.held[l.key] == l {
		delete(c.held, l.key)
	}
	l.releasing = false
	c.mu.Unlock()
}

func (c *Client) setReleasing(l *Lease, on bool) (sawDelete bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l.releasing = on
	sawDelete = l.sawDelete
	l.sawDelete = false
	return sawDelete
}

// txn runs one transaction on the record: if it is this acquisition's
// (same creation revision, same owner token and hold count), then ops;
// otherwise read it and the first record of the lock's queue.
func (l *Lease) txn(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	return l.c.etcd.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev),
		clientv3.Compare(clientv3.Value(l.key), "=", encodeValue(l.owner.Value(), l.count)),
	).Then(ops...).Else(
		clientv3.OpGet(l.key),
		clientv3.OpGet(dirOf(l.key), append(queueOpts(0), clientv3.WithLimit(1))...),
	).Commit()
}

// classify explains a failed txn: ErrNotOwner when the record was
// overwritten or another acquisition holds the lock now, ErrNotFound when
// nobody does, or (nil and the stored hold count) when the record is ours
// with another count.
func (l *Lease) classify(resp *clientv3.TxnResponse) (int, error) {
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		if len(resp.Responses[1].GetResponseRange().Kvs) > 0 {
			return 0, ErrNotOwner
		}
		return 0, ErrNotFound
	}
	kv := kvs[0]
	tok, n, ok := decodeValue(kv.Value)
	if kv.CreateRevision != l.rev || !ok || tok != l.owner.Value() {
		return 0, ErrNotOwner
	}
	return n, nil
}

// maxAttempts bounds the retries after finding a different stored hold
// count, which only an earlier call with a lost reply can cause.
const maxAttempts = 3

var errCountRace = errors.New("lease: hold count changed during the call")

// Release gives up one hold. At the last hold it deletes the record and the
// lease ends with ErrReleased; otherwise it stores the count minus one.
// Either way it is one transaction comparing this acquisition's owner token
// and creation revision.
//
// It returns nil when done; an error matching ErrNotOwner when another
// acquisition holds the lock now, or ErrNotFound when nobody does (it
// expired, was deleted, or was already released) — in both cases this
// holder had lost the lock, and the lease ends with a *LostError if it had
// not already. Any other error means the outcome is unknown (etcd could not
// be reached or ctx ended); calling Release again is safe and does not
// release twice. Releasing a lease that was already released returns an
// error, never nil.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return errNilLease
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.Err() == ErrReleased {
		l.c.met.duplicates.Inc()
	}
	for range maxAttempts {
		last := l.count <= 1
		op := clientv3.OpDelete(l.key)
		if last {
			l.c.setReleasing(l, true)
		} else {
			op = clientv3.OpPut(l.key, encodeValue(l.owner.Value(), l.count-1), clientv3.WithIgnoreLease())
		}
		resp, err := l.txn(ctx, op)
		if err != nil && errors.Is(rpcError(err), ErrPermissionDenied) {
			if last {
				l.c.setReleasing(l, false)
			}
			l.logResult("release", "denied", err)
			return fmt.Errorf("lease: release %q: %w", l.name, rpcError(err))
		}
		if err != nil {
			after := l.count - 1
			if last {
				after = 0
				if l.c.setReleasing(l, false) {
					l.lose(ErrKeyDeleted)
				}
			}
			l.pending = &pending{op: "release", before: l.count, after: after}
			l.logResult("release", "unknown", err)
			return fmt.Errorf("lease: release %q: outcome unknown: %w", l.name, errors.Join(err, ctx.Err()))
		}
		if resp.Succeeded {
			l.pending = nil
			if last {
				l.c.forget(l)
				l.c.freeSlot(l.sess, l.key)
				l.end(ErrReleased)
			} else {
				l.count--
			}
			l.logResult("release", "done", nil)
			return nil
		}
		if last {
			l.c.setReleasing(l, false)
		}
		stored, cerr := l.classify(resp)
		p := l.pending
		l.pending = nil
		if cerr != nil {
			if errors.Is(cerr, ErrNotFound) && p != nil && p.op == "release" && p.after == 0 {
				// An earlier Release whose reply was lost deleted it.
				l.c.forget(l)
				l.c.freeSlot(l.sess, l.key)
				l.end(ErrReleased)
				l.logResult("release", "done", nil)
				return nil
			}
			l.lose(cerr)
			l.logResult("release", outcome(cerr), cerr)
			return fmt.Errorf("lease: release %q: %w", l.name, cerr)
		}
		l.count = stored
		if p != nil && p.op == "release" && stored == p.after {
			l.logResult("release", "done", nil)
			return nil
		}
	}
	return errCountRace
}

// Reenter adds one hold to the lease, atomically in etcd: one transaction
// comparing this acquisition's owner token, creation revision and hold
// count. Every Reenter needs its own Release. The fencing token does not
// change. Errors are as for Release; after an outcome-unknown error, call
// Reenter again (it will not add two holds) or treat the lease as lost.
func (l *Lease) Reenter(ctx context.Context) error {
	if l == nil {
		return errNilLease
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	for range maxAttempts {
		resp, err := l.txn(ctx, clientv3.OpPut(l.key, encodeValue(l.owner.Value(), l.count+1), clientv3.WithIgnoreLease()))
		if err != nil && errors.Is(rpcError(err), ErrPermissionDenied) {
			l.logResult("reenter", "denied", err)
			return fmt.Errorf("lease: reenter %q: %w", l.name, rpcError(err))
		}
		if err != nil {
			l.pending = &pending{op: "reenter", before: l.count, after: l.count + 1}
			l.logResult("reenter", "unknown", err)
			return fmt.Errorf("lease: reenter %q: outcome unknown: %w", l.name, errors.Join(err, ctx.Err()))
		}
		if resp.Succeeded {
			l.pending = nil
			l.count++
			l.logResult("reenter", "done", nil)
			return nil
		}
		stored, cerr := l.classify(resp)
		p := l.pending
		l.pending = nil
		if cerr != nil {
			l.lose(cerr)
			l.logResult("reenter", outcome(cerr), cerr)
			return fmt.Errorf("lease: reenter %q: %w", l.name, cerr)
		}
		l.count = stored
		if p != nil && p.op == "reenter" && stored == p.after {
			l.logResult("reenter", "done", nil)
			return nil
		}
	}
	return errCountRace
}

// Renew confirms the lease and extends it: one transaction compares this
// acquisition's owner token and creation revision (it writes nothing, so a
// stale Renew can neither extend a newer holder nor re-create a missing
// record), then one keep-alive of the Client's session extends the
// validity of every lease of the Client from the moment it was sent.
//
// The Client renews its session in the background, so Renew is needed only
// to confirm ownership before a step that matters. Errors are as for
// Release; when the lease has already ended locally (Done is closed) Renew
// returns Err() even if the record is still there, because the Client gives
// such records up.
func (l *Lease) Renew(ctx context.Context) error {
	if l == nil {
		return errNilLease
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	confirmed := false
	for range maxAttempts {
		resp, err := l.txn(ctx)
		if err != nil && errors.Is(rpcError(err), ErrPermissionDenied) {
			l.logResult("renew", "denied", err)
			return fmt.Errorf("lease: renew %q: %w", l.name, rpcError(err))
		}
		if err != nil {
			l.logResult("renew", "unknown", err)
			return fmt.Errorf("lease: renew %q: outcome unknown: %w", l.name, errors.Join(err, ctx.Err()))
		}
		if resp.Succeeded {
			confirmed = true
			break
		}
		stored, cerr := l.classify(resp)
		if cerr != nil {
			l.lose(cerr)
			l.logResult("renew", outcome(cerr), cerr)
			return fmt.Errorf("lease: renew %q: %w", l.name, cerr)
		}
		l.pending = nil
		l.count = stored
	}
	if !confirmed {
		return errCountRace
	}
	if err := l.Err(); err != nil {
		return err
	}
	sent := time.Now()
	resp, err := l.c.etcd.KeepAliveOnce(ctx, l.sess.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.c.endSession(l.sess, ErrSessionExpired)
		return l.Err()
	case err != nil:
		l.logResult("renew", "unknown", err)
		return fmt.Errorf("lease: renew %q: keep-alive: outcome unknown: %w", l.name, errors.Join(err, ctx.Err()))
	}
	l.c.extend(l.sess, sent.Add(time.Duration(resp.TTL)*time.Second-l.sess.margin))
	l.logResult("renew", "done", nil)
	return nil
}

func outcome(err error) string {
	switch {
	case errors.Is(err, ErrPermissionDenied):
		return "denied"
	case errors.Is(err, ErrNotOwner):
		return "not_owner"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	}
	return "unknown"
}

func (l *Lease) logResult(op, result string, err error) {
	l.c.met.results.WithLabelValues(op, result).Inc()
	level := slog.LevelInfo
	if op == "renew" && err == nil {
		level = slog.LevelDebug
	}
	attrs := append(l.attrs(), logattr.Outcome(result))
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if op == "release" && err == nil {
		attrs = append(attrs, slog.Duration("held", time.Since(l.acquired)))
	}
	l.c.log.LogAttrs(context.Background(), level, "lease "+op, attrs...)
}

type ctxKey struct{ name string }

// NewContext returns a copy of ctx carrying l, so that code called with ctx
// can reenter the lease explicitly through FromContext instead of
// acquiring the lock again (which would wait for itself).
func NewContext(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, ctxKey{l.name}, l)
}

// FromContext returns the lease for the lock called name carried by ctx.
func FromContext(ctx context.Context, name string) (*Lease, bool) {
	l, ok := ctx.Value(ctxKey{name}).(*Lease)
	return l, ok
}

// Do acquires the lock called name, runs fn with a context that carries
// the lease and is cancelled the moment the lease is lost, and releases it.
// ctx bounds the wait and is fn's parent context; the release runs even
// when ctx has ended, bounded by the TTL.
//
// Do returns fn's error joined with the lease's *LostError if the lease was
// lost before fn returned (the work may have been cut short), or with the
// Release error otherwise.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error) (err error) {
	l, err := c.Acquire(ctx, name)
	if err != nil {
		return err
	}
	var lost error
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.sess.ttl)
		defer cancel()
		relErr := l.Release(rctx)
		if lost != nil {
			err = errors.Join(err, lost)
		} else {
			err = errors.Join(err, relErr)
		}
	}()
	lctx, cancel := l.Context(ctx)
	defer cancel()
	err = fn(lctx, l)
	lost = l.Err()
	return err
}
