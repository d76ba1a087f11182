// Package lease holds named leases (distributed locks) in etcd, and gives
// each acquisition a handle that alone can renew, reenter and release it,
// and a fencing token that the resources it protects can check.
//
//	locks, err := lease.New(etcdClient, lease.WithTTL(10*time.Second))
//	...
//	defer locks.Close()
//
//	l, err := locks.Acquire(ctx, "orders") // ctx bounds the wait only
//	...
//	work, cancel := l.Context(ctx) // cancelled the moment l is lost
//	err = writeOrders(work)        // the write carries the fencing token
//	cancel()
//	if err := l.Release(ctx); err != nil { // check it: see Results
//	...
//	err = locks.Do(ctx, "orders", func(ctx context.Context, l *lease.Lease) error {
//		// ctx is cancelled, with the reason, the moment the lease is lost,
//		// and carries the fencing token that guard.Transport sends.
//		return writeOrders(ctx)
//	})
//
// (the package's Example_orders, whose output is checked).
//
// # How it works
//
// Each Client owns etcd session leases, each renewed in the background
// every third of its TTL: a current one per TTL in use (the Client's, see
// WithTTL, and any of WithLeaseTTL), to which new records are attached
// until it carries 1,000 of them; the Client then grants another for later
// acquisitions, keeps renewing the full one while it holds or waits with
// any record, and revokes it once it does not. A session of a TTL other
// than the Client's is revoked too once it has held and waited for
// nothing for a minute. An acquisition writes a
// record under
// <prefix><name>/<session>-<slot> in one transaction (the Client reuses a
// slot once its record is gone, so etcd's key index does not grow with
// every acquisition): its value holds a fresh owner token
// (package owner) and a hold count, and it is attached to a session. The
// record whose creation revision is lowest holds the lock; the others wait
// in that order (FIFO across processes), each woken by its Client's watch
// of the record ahead of it when that record goes. The creation
// revision of the record is the fencing token (package fence): every later
// acquisition's record is created at a higher revision.
//
// The transaction that writes a record into a lock that looks free
// compares the lock's whole directory with nothing: if it is empty the
// record is the queue, and nothing is read. A lock the Client found taken
// when it last wrote there is written, instead, with a read of its queue
// in the same transaction, as is a lock that turns out to be taken (then
// after that first, failed, transaction), until an acquisition finds it
// free again.
//
// # Semaphores, read/write locks and elections
//
// The same records, sessions, watches and owner-checked calls serve three
// more shapes of lock, each admitted by its own rule over the one FIFO
// queue of a name:
//
//   - Client.Semaphore(name, n): at most n Permits at once; a waiter is
//     admitted once fewer than n records are ahead of it. Permits have no
//     fencing token: several are held at once, so "newest wins" would
//     refuse an older, valid holder. Give each holder its own part of the
//     resource, or make its writes idempotent.
//   - Client.RWMutex(name): any number of read locks (Permits) or one write
//     lock (a fenced Lease). A reader waits for every writer ahead of it,
//     so readers cannot starve a writer; a writer waits for everything
//     ahead. A read lock's Permit.Revision lets a resource refuse a read
//     that a newer writer overtook (its write token is higher).
//   - Client.Election(name): candidates Campaign (or Run) with a public
//     value; the head of the queue leads, for a Term that is a fenced
//     Lease. Leader tells who leads now, Observe every change (from one
//     watch's events, so compaction alone never hides a term; a Leader
//     with Gap set follows history compacted while Observe was cut off);
//     Proclaim changes the published value and Release ends the term.
//   - Client.AcquireAll(names, opts...): several exclusive locks, all or nothing,
//     as one Set. One transaction writes a record into every lock's queue,
//     so all of them have the same creation revision (the Set's fencing
//     revision; each is a normal token of its lock), and the Set is held
//     once its record heads every queue. Waiting for a set cannot
//     deadlock: an acquisition only ever waits for records created before
//     its own, and two overlapping sets, written at different revisions,
//     are in the same order in every queue they share. If any lock of the
//     set fails, every record is removed again. TryAcquireAll fails at
//     once with ErrHeld instead of waiting, after deleting its records.
//     Up to MaxSetSize locks: two operations per lock in one transaction,
//     within etcd's default --max-txn-ops of 128.
//
// A record's key names its kind (and a semaphore's size): participants
// must agree, and one that finds another kind or size ahead of it fails
// with ErrMismatch. A write lock, an election candidate and a plain Lease of
// the same name are the same kind and queue together. Loss, lost replies,
// cancellation and clean-up behave as for Leases.
//
// # What a Client costs etcd
//
// A Client watches only keys of its own locks, never a whole lock's queue: its
// own record keys, while it holds, waits with or cleans up a record there and
// for a TTL after that (an acquisition reuses its Client's key for that lock,
// so a lock taken again and again keeps its watch); and, for each acquisition
// that waits, the one record it waits behind (the last one ahead of it that
// blocks it), or for a semaphore the lock's directory. A release thus wakes the
// one waiter behind it (the readers behind it, for a write lock; every waiting
// permit of a semaphore), whatever the length of the queue. All of a Client's
// watches share one gRPC Watch stream that the Client opens itself (on the
// etcd client's connection, with its credentials), and each starts at the
// current revision, so etcd keeps it in its "synced" set and delivers events
// within a millisecond. A watch costs the Client a few hundred bytes and no
// goroutine, so a Client keeps one per key however many locks it holds.
// With K own record keys in use, W waiting acquisitions and S of them semaphore
// waiters, a Client costs etcd:
//
//   - sessions: one etcd lease per 1,000 records held or waited with (or
//     fewer: a session that cannot take a whole set's records is closed to
//     new ones, and a set larger than that takes a new session of its own),
//     per TTL in use, each renewed with one keep-alive every TTL/3: with
//     100,000 locks held and the default TTL, 100 sessions and 30
//     keep-alives per second. When a session ends (revoked by Close, or
//     expired after the Client died), etcd deletes its keys in one
//     transaction, during which no other write of the cluster applies; the
//     bound keeps each such transaction to 1,000 deletes (kube-apiserver
//     caps its leases alike), so a big holder's death is many small
//     revocations rather than one that stalls the cluster;
//   - watchers: one per session, of the requests to release its records
//     (admin.Admin.RequestRelease; no event until someone asks), plus at most
//     K + W (S semaphore waiters of one lock share one directory watch);
//   - requests: per acquisition, one transaction to write its record (two
//     when a lock it thought free turns out to be taken, see above) and,
//     while it waits, one read of the queue whenever the record it waits
//     behind goes and others may still block it, and, when that delete
//     admits it, one serializable read of its own record at the delete's
//     revision (each watched key has its own watch, so a delete of its own
//     record that came first may still be on its way: the read makes sure
//     a waiter never holds a record that was gone before it was admitted;
//     a semaphore waiter, whose directory watch delivers both in order,
//     skips it); per Release, Reenter or Proclaim, one transaction;
//   - events per second: the changes of its own records (two per
//     acquire and release, one per Reenter, nested Release or Proclaim),
//     plus one delete per record a waiter waits behind (and, when that
//     record's owner gave up rather than released, one read of the queue
//     ahead of it), plus every change in the directories of the
//     semaphores it waits for, plus one keep-alive per session every
//     TTL/3;
//   - with WithLockDelay only: one more etcd lease per session and
//     distinct delay (one grant on first use, one more keep-alive every
//     TTL/3), the marker's put and delete inside the record's own
//     transactions (two more events per acquire and release), and, for a
//     waiter behind a holder that has a marker, one more read of the queue
//     when the first of the two goes. Without the option nothing of this
//     happens: no request, op or event is added.
//
// Its getters (Lease.Holds, Err, ValidUntil, Term.Value and the like)
// read local state: they cost etcd nothing and never wait for a request.
//
// Changes of other Clients' locks never reach it, nor do changes of its
// own locks' queues other than those above, however many locks it holds.
// When its stream is lost (an error, a member without a leader, a
// restart), the Client opens another and resumes every watch after the
// last event it delivered; resuming thousands of watches from a past
// revision waits for etcd's sweep of unsynced watchers (512 every 100 ms).
//
// Release and Reenter are each one transaction that compares the record's owner
// token, hold count and mod revision as last confirmed (the mod revision names
// this acquisition's own last write, so it pins the creation revision too), so
// a holder that paused past its TTL can never release or reenter the lock of
// the holder that replaced it, and a request that etcd applies late can never
// apply after any later change. Renew is one read that checks the creation
// revision and owner token, then a keep-alive.
//
// # One contract for everything held
//
// A *Lease, a *Permit, a *Term and a *Set each satisfy Handle, with one
// vocabulary: Names (the locks held), Acquired, Fences (the fencing tokens,
// one per name; none for a Permit), ValidUntil, Done and Err (the end and
// its reason), Context (cancelled, with the reason, at the end), Renew,
// Release (a Term's resigns) and ReleaseRequested. Code that only holds
// and lets go, such as a supervisor that stops its work when Done closes
// and plans its next step by ValidUntil, takes a Handle and serves them
// all (see ExampleHandle). What is particular stays on each type: Reenter
// and Holds on a Lease, Proclaim and Transfer on a Term, a Set's Lease(name),
// a read lock's Permit.Revision. Term.Since, Term.Resign and Set.Revision
// are deprecated aliases of Acquired, Release and Fences.
//
// # Several locks at once
//
// Client.AcquireAll takes a Set of up to MaxSetSize exclusive locks, all or
// nothing and without deadlock (see above). Each lock keeps its own
// queue, record, owner token and fencing token; what the set shares is the
// revision of the one transaction that wrote every record, so
// Set.Fence(name) is that lock's normal token, and every token of
// Set.Fences has the same revision. A set's work runs under Set.Context,
// which is cancelled when any of its leases ends (the cause names the
// lock) and carries all of its tokens (fence.NewTokensContext): guard.Transport
// sends them as one comma-separated Fencing-Token line, grpcguard one
// metadata value each, and each resource checks the token of the lock it
// is bound to. sqlguard's RunTxAll fences each row with its own token in
// one transaction, so a superseded set cannot write one account of a
// transfer and not the other. Release the set with Set.Release; Renew
// renews every lease. A Set has no Reenter: reenter one of its leases
// (Set.Lease(name)) if a call must.
//
// A set of k locks costs etcd what k acquisitions cost, in fewer
// requests: one transaction instead of k, which, as for one lock, compares
// each lock's directory with nothing and puts the k records when every
// lock looks free (none found taken lately), and otherwise puts each
// record and reads each queue (2k operations; a set that finds a lock
// taken in the first way writes the second way), each member's watch and
// admission as for an
// Acquire (k watched keys, and k goroutines while it waits), one
// owner-checked transaction that deletes all k records at release, and k
// reads and keep-alives for Set.Renew. In the model above a set counts
// as k own record keys (K) and, while it waits, as many waiting
// acquisitions (W) as locks it still waits for.
//
// # One acquisition pipeline
//
// Acquire is AcquireAll of one lock, and every acquisition (a Semaphore's
// permit, an RWMutex's lock, a Campaign) runs the same attempt: it claims
// a record key per lock on the Client's session, writes every record in
// one transaction (with its lock-delay marker, if any), waits until each
// record is admitted under its kind's rule (exclusive, read, semaphore
// slot), and on failure removes what it wrote, before it returns for a
// try and in the background otherwise. So a set takes Acquire's options
// (WithMetadata, WithMaxHold, WithLockDelay), each applying to every lock
// of the set, and a fix to one path is a fix to all: a try of a set, like
// a TryAcquire, returns only once its records are gone or with a
// *LeftBehindError. With WithLockDelay a set holds at most
// MaxDelayedSetSize locks: each marker is one more operation in the
// transaction. What differs is the first write's shape: a TryAcquire of
// one exclusive lock probes it in one transaction that writes only into
// a free lock, while a TryAcquireAll writes its records the queueing way
// and removes them if a lock was held.
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
//   - an error matching ErrOutcomeUnknown: etcd's reply was lost or ctx
//     ended. A Release, Reenter or Proclaim has already resent itself
//     while ctx allowed, for up to one TTL (see Leader failure). Retry the
//     same call: it never applies twice, whatever was
//     called in between (a Renew does not settle it). A Release of the
//     last hold whose record then goes is a release: Done closes with
//     ErrReleased and the retry returns nil, even if a waiter has taken
//     the lock meanwhile.
//   - ErrPermissionDenied: etcd refused; nothing was applied.
//
// Acquire, TryAcquire and Do return ctx's error, ErrClosed, ErrHeld
// (TryAcquire), ErrPermissionDenied, ErrInvalidName, ErrTTLTooShort or
// ErrServerTooOld (a *ServerVersionError: a member older than
// MinServerVersion), or
// an error matching ErrRetryable after which calling again may succeed (the
// session ended during the wait, the waiter's record was removed, etcd was
// unreachable, or, from Do, the lease was lost). A failed try's error can
// also be a *LeftBehindError (matching ErrLeftBehind, and still its cause,
// such as ErrHeld): the records it wrote could not be confirmed deleted.
//
// Term.Transfer returns the same, or a *NotCandidateError (matching
// ErrNotCandidate) when the chosen candidate is not waiting: nothing
// changed, unless it left while the transfer was under way (Resigned).
//
// A lease ends, and its Done channel closes, when it is released, when the
// Client closes, or when it is lost. Err says which: ErrReleased (or
// ErrTransferred, which matches it, for a term handed on), ErrClosed,
// or a *LostError matching ErrLost and one cause: ErrKeyDeleted,
// ErrKeyOverwritten (seen through the watch, within milliseconds),
// ErrSessionExpired (the session lease was revoked or expired: checked with
// etcd when a record is deleted, so a revoke is reported as such), ErrDeadline
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
//     Client.Headroom tells how far that deadline is, and Client.Ready (and
//     ProbeHandler, for a readiness probe) fails once it is nearer than a
//     chosen minimum: before Done closes, while renewals go unconfirmed.
//   - Reentrancy is explicit: Reenter on the handle (or on the handle that
//     FromContext finds in a ctx) adds one hold in etcd; each Release takes
//     one; the record goes at zero. Nothing is keyed by goroutine: a second
//     Acquire of the same name, even from the same goroutine and Client, is
//     a different acquisition and waits.
//   - A failed or cancelled Acquire leaves no record behind. It returns
//     within its ctx and the Client deletes the record, comparing its owner
//     token, in the background. When a write of the record went out
//     without a reply, etcd may still apply it later: the Client then
//     deletes the record whenever its watch sees it appear, uses a new
//     session for later acquisitions, and revokes the old one as soon as
//     nothing held or waiting uses it, which removes the record for good
//     (a write that arrives after the revoke fails).
//   - A failed try (TryAcquire, TryAcquireAll, TryLock, TryRLock,
//     Semaphore.TryAcquire) returns only once the records it wrote are
//     deleted, so that a lock it found free is free again when it returns;
//     if it cannot confirm that within ctx and one TTL, its error is also a
//     *LeftBehindError (matching ErrLeftBehind) naming the locks whose
//     records may remain, and the Client deletes them in the background.
//   - A record that no session keeps (an outsider's plain Put into the
//     prefix) blocks its lock until deleted; a waiter stuck behind it for a
//     TTL logs a warning and counts fencekit_lease_foreign_records_total.
//     Delete such a key by hand (etcdctl del KEY).
//
// # Per-acquisition options and requests to release
//
// Acquire, TryAcquire and Do take AcquireOptions: WithMaxHold(d) ends the
// lease after d even while renewals succeed (cause ErrMaxHold), before its
// record is deleted so that the next holder starts after the end;
// WithMetadata(text) stores a short note with the record, which Inspect
// (Record.Value) and Lease.Metadata show; WithLeaseTTL(d) attaches the
// record to a session of TTL d rather than the Client's, so that one Client
// holds short-TTL locks (a quick takeover when it dies) next to long ones
// (room for long pauses). AcquireAll and TryAcquireAll take them too;
// semaphores, read/write locks and Campaign take WithLeaseTTL only.
// admin.Admin.RequestRelease asks the
// holder of a given fence to let go, without taking anything: the
// holder's Lease.ReleaseRequested closes, and Do cancels its function with
// ErrReleaseRequested and releases. ForceRelease remains the hard way.
//
// # Operator tools
//
// An admin.Admin (package lease/admin: admin.New(cli, prefix), with
// Client.Prefix for a process that already has a Client) holds what
// operators and tools do to locks they do not hold: Inspect and
// InspectAll read a lock's holder and queue (owner digests, never
// tokens), RequestRelease asks a holder to let go and ForceRelease
// deletes a holder's record, each in one transaction comparing the
// record's creation revision. Like a Verifier, it has no
// session and holds nothing; "fencekit status" and "fencekit release" are
// built on it.
//
// # Lock-delay
//
// WithLockDelay(d) is for resources that cannot check fencing tokens:
// when the acquisition's record disappears without a Release (its session
// expired or was revoked, ForceRelease deleted it, WithMaxHold ended it),
// the lock admits nobody for d; a Release hands over at once. The delay
// lives in etcd as a marker key, <record key>.d<n>, that holds the
// record's place in the queue, so every participant honours it, whatever
// its options or version. d rounds up to whole seconds; at most
// MaxLockDelay. Inspect shows a marker as Record.LockDelay and a delay
// under way as LockState.DelayedUntil with no Holder; the Verifier and
// elections never take a marker for a holder (Election.Leader returns a
// *NoLeaderError with DelayedUntil set). Sets, semaphores, read-write
// locks and elections take no AcquireOption; they wait behind the markers
// they meet. How the marker lives and dies, and what was measured:
// https://github.com/fencekit/fencekit/blob/main/docs/locks.md#lock-delay.
//
// # Planned hand-off
//
// Term.Transfer(ctx, to) hands an election's term to a candidate that
// waits in its queue (Election.Candidates lists them, each named by the
// term it would lead with): the leader's term ends first (Done closes;
// its Context is cancelled with ErrTransferred), then one owner-checked
// transaction deletes the leader's record and admits to: no overlap. A to
// that does not wait is refused with a *NotCandidateError before anything
// ends or is written; candidates queued between are passed over and queue
// again at the tail by themselves. Election.RequestTransfer asks the
// leader from another process: Election.Run and Client.Do transfer by
// themselves; a Term from Campaign sees Term.ReleaseRequested close and
// Term.TransferRequested name the candidate. An unknown outcome ends the
// term all the same. Details and measurements:
// https://github.com/fencekit/fencekit/blob/main/docs/locks.md#hand-off.
//
// # Server versions
//
// Before granting its first session, a Client reads the version of each of
// its etcd client's endpoints and refuses members older than
// MinServerVersion with a *ServerVersionError; a member with a known
// lock-relevant bug is logged at Warn
// (https://github.com/fencekit/fencekit/blob/main/docs/operations.md#sessions-ttl-and-etcd).
//
// # Leader failure
//
// When the etcd leader dies or freezes, a follower answers only at etcd's
// request timeout (7 s by default), though a new leader is elected within
// one or two election timeouts. So a Release, Reenter or Proclaim gives
// each try its own deadline (four times the Client's recent reply time,
// 250 ms to 2 s, a quarter longer per try) and then sends it again, as its
// caller's retry would be (never applied twice), to the etcd client's next
// endpoint, for up to one TTL and within ctx; and a background renewal
// waits at most a third of the renewal interval while there is time for
// another. Keep the TTL at least five election timeouts (5 s with etcd's
// defaults), and set gRPC keepalives on the etcd client, so that sessions
// on healthy members survive a stalled leader: the rule, its reasons and
// the measurements are in https://github.com/fencekit/fencekit/blob/main/docs/operations.md#sessions-ttl-and-etcd.
//
// # Non-guarantees
//
// A lease alone is not mutual exclusion: a holder can pause between
// checking Done and writing. Only the resource can close that gap, by
// refusing writes whose fencing token is older than one it already
// accepted: see packages guard and sqlguard. The Client assumes its
// monotonic clock does not run slower than the etcd leader's by more than
// the safety margin over one TTL; tokens are revisions of one etcd
// cluster; the leases of a Client share its sessions, so use several
// Clients to isolate them; and etcd can keep a crashed holder's locks
// taken longer than a TTL (after a leader change, or when thousands of
// sessions expire at once). Each of these, with measurements:
// https://github.com/fencekit/fencekit/blob/main/docs/concepts.md#what-it-does-not-guarantee.
//
// # Concurrency
//
// Client and Lease are safe for concurrent use. Renew, Reenter and Release
// of one Lease are serialised; the getters (Holds, Err, Term.Value and the
// like) answer from local state and never wait for one of them.
//
// Inside, every goroutine takes the package's locks in one order, top to
// bottom, and only the first two are ever held across an etcd request:
//
//  1. a Lease's operation lock (one Renew, Reenter, Release or Proclaim);
//  2. the Client's session grant (one session created at a time);
//  3. the Client's session set (the sessions, and whether it is closed);
//  4. the Client's records table (its watches, held leases, waiters,
//     orphans and each record's entry: its lock-delay marker, a request
//     to release or transfer it, its release state; watch events,
//     promotions and session ends are judged under it);
//  5. a waiter's view of its queue;
//  6. a session's state;
//  7. the set of locks found taken lately;
//  8. a Lease's bound contexts (Context), which its end cancels;
//  9. the state of the Client's watches on its gRPC Watch stream (the
//     stream delivers events to the records table without it).
//
// Leases end, and their Done channels close, after these locks are
// released. The ranks are in internal/lockorder; tests built with the
// fencekit_lockcheck tag check every Lock against them.
package lease
