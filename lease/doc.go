// Package lease holds named leases (distributed locks) in etcd, and gives
// each acquisition a handle that alone can renew, reenter and release it,
// and a fencing token that the resources it protects can check.
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
//	locks, err := lease.New(cli, lease.WithTTL(10*time.Second))
//	if err != nil { ... }
//	defer locks.Close()
//
//	l, err := locks.Acquire(ctx, "orders")   // ctx bounds the wait only
//	if err != nil { ... }
//	work, cancel := l.Context(ctx)            // cancelled the moment l is lost
//	err = writeOrders(work, l.Fence())        // every write carries the token
//	cancel()
//	if err := l.Release(ctx); err != nil { ... } // check it: see below
//
// or, the same in one call: locks.Do(ctx, "orders", func(ctx, l) error { ... }).
//
// # How it works
//
// Each Client owns one etcd session lease, renewed in the background every
// third of its TTL. An acquisition writes a record under
// <prefix><name>/<session>-<slot> in one transaction (the Client reuses a
// slot once its record is gone, so etcd's key index does not grow with
// every acquisition): its value holds a fresh owner token
// (package owner) and a hold count, and it is attached to the session. The
// record whose creation revision is lowest holds the lock; the others wait
// in that order (FIFO across processes), each woken by the Client's single
// watch of its prefix when the record ahead of it goes. The creation
// revision of the record is the fencing token (package fence): every later
// acquisition's record is created at a higher revision.
//
// Release, Renew and Reenter are each one transaction that compares the
// record's creation revision and owner token (and hold count), so a holder
// that paused past its TTL can never release, extend or reenter the lock of
// the holder that replaced it.
//
// # Results
//
// Release, Renew and Reenter return:
//
//   - nil: done.
//   - an error matching ErrNotOwner: another acquisition holds the lock
//     now. This holder lost it; stop its side effects.
//   - an error matching ErrNotFound: nobody holds it (expired, deleted,
//     already released). This holder lost it too.
//   - anything else: the outcome is unknown (etcd unreachable, ctx ended).
//     Retrying the same call is safe and never applies it twice.
//
// A lease ends, and its Done channel closes, when it is released, when the
// Client closes, or when it is lost. Err says which: ErrReleased, ErrClosed,
// or a *LostError matching ErrLost and one cause: ErrKeyDeleted,
// ErrKeyOverwritten (seen through the watch, within milliseconds),
// ErrSessionExpired (the session lease was revoked or expired), ErrDeadline
// (renewals were not confirmed in time), ErrNotOwner or ErrNotFound (found
// by a Release, Renew or Reenter).
//
// # Guarantees
//
//   - Owner-checked state changes: no call acts on a record by key alone.
//   - A strictly increasing fencing token per lock.
//   - Prompt loss: each renewal extends a local validity deadline measured
//     on the monotonic clock from when it was sent, minus a safety margin
//     (WithSafetyMargin). When it passes, every lease of the Client ends
//     with ErrDeadline before the server can expire the session and hand the
//     lock to anyone else (given bounded clock-rate drift), and the Client
//     revokes that session and starts a new one for later acquisitions.
//   - Reentrancy is explicit: Reenter on the handle (or on the handle that
//     FromContext finds in a ctx) adds one hold in etcd; each Release takes
//     one; the record goes at zero. Nothing is keyed by goroutine: a second
//     Acquire of the same name, even from the same goroutine and Client, is
//     a different acquisition and waits.
//   - A failed or cancelled Acquire leaves no record behind; if etcd cannot
//     be reached at that moment, the Client deletes the record (comparing
//     its owner token) in the background, or it goes with the session.
//
// # Non-guarantees
//
// A lease alone is not mutual exclusion. A holder can pause (GC, VM freeze,
// SIGSTOP) between checking Done and writing; its write can sit in a
// network buffer past the end of its lease. Jepsen found etcd 3.4.3's locks
// lost about 18% of acknowledged updates this way with 2 s TTLs. Only the
// resource can close that gap, by refusing writes whose fencing token is
// older than one it already accepted: see packages guard and sqlguard.
//
// Clocks: the Client assumes its monotonic clock does not run slower than
// etcd leader's by more than the safety margin over one TTL. Wall-clock
// jumps do not matter. A leader change gives every session a fresh TTL on
// the server, which only makes the local deadline more conservative.
//
// Tokens are revisions of one etcd cluster. Restoring a snapshot without
// `etcdutl snapshot restore --bump-revision` (and marking compacted) can
// hand out tokens that repeat; don't.
//
// All leases of a Client share its session: a session lost to a partition
// ends all of them together. Use several Clients to isolate them.
//
// # Concurrency
//
// Client and Lease are safe for concurrent use. Renew, Reenter and Release
// of one Lease are serialised.
package lease
