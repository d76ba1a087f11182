package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/owner"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LockState is what etcd holds for one lock at one revision: its holder and
// its waiters in the order they will be served. For a semaphore or a read
// lock, where several records hold at once, Holder is the first of them and
// the others are among Waiters with Held set. It is a snapshot for
// operators and tools; by the time it is read the lock may have changed
// hands. It never carries an owner token.
type LockState struct {
	// Name is the lock's name.
	Name string
	// Holder is the acquisition holding the lock, or nil when nobody
	// does.
	Holder *Record
	// Waiters are the acquisitions waiting for the lock, first to be
	// served first.
	Waiters []Record
	// Revision is the etcd revision the snapshot was read at.
	Revision int64
	// DelayedUntil is, while the lock waits out a lock-delay (see
	// WithLockDelay) after a holder vanished without releasing, about when
	// the delay ends (the read's time plus the TTL etcd reported for the
	// marker's lease, rounded to whole seconds and lagging by up to its
	// expiry check); zero otherwise. Nobody holds the lock meanwhile: its
	// records are all Waiters.
	DelayedUntil time.Time
}

// Record describes one acquisition's lock record, without its owner token.
type Record struct {
	// Fence is the acquisition's fencing token (the record's creation
	// revision).
	Fence fence.Token
	// OwnerDigest is the digest of the owner token, as logs show it
	// (owner.Token.Digest).
	OwnerDigest string
	// Instance is the instance id carried by the owner token: the pod or
	// host of the holder. It is "" when the record's value is not a
	// fencekit owner token.
	Instance string
	// Since is a lower bound on when the record was written: the start
	// of the owner's process, carried by its owner token, to the
	// millisecond. etcd stores no times, so the exact moment of the write
	// (or, for a holder that waited, of reaching the head of the queue) is
	// not known; for a process that acquires right after it starts, such
	// as "fencekit run", the bound is close. Zero when unknown.
	Since time.Time
	// Holds is the hold count (1 plus one per Reenter not yet released),
	// or 0 when the record's value is not a fencekit lock value.
	Holds int
	// Session is the etcd lease (the holder Client's session) the record
	// is attached to; 0 when none.
	Session int64
	// SessionTTL is how long the session has left unless renewed, as the
	// etcd leader reported it (whole seconds); negative when the session
	// no longer exists or was not read (ForceRelease does not read it).
	SessionTTL time.Duration
	// Key is the record's etcd key.
	Key string
	// Kind is the kind of lock the record belongs to: "lock" (a Lease, a
	// write lock or an election candidate), "read" (a read lock of an
	// RWMutex) or "semaphore/N" (a permit of a semaphore of N); "" for a
	// record no fencekit Client wrote.
	Kind string
	// Held reports whether the record holds the lock: the head of the
	// queue for a lock, every record with no write lock ahead for a read
	// lock, the first N for a semaphore of N.
	Held bool
	// Value is an election candidate's public value, or the metadata of an
	// acquisition (WithMetadata); "" otherwise. It is the holder's to
	// write: treat it as untrusted text.
	Value string
	// LockDelay is the acquisition's lock-delay (WithLockDelay): how long
	// the lock will wait after its record vanishes without a Release; 0
	// when none.
	LockDelay time.Duration
}

// NotHolderError is returned by ForceRelease when the given fencing
// revision is not that of the lock's current holder. It matches ErrNotOwner
// when another acquisition holds the lock, and ErrNotFound when nobody does.
// Nothing was deleted.
type NotHolderError struct {
	// Lock is the lock's name.
	Lock string
	// Revision is the fencing revision ForceRelease was given.
	Revision int64
	// Holder is the current holder's fencing revision, 0 when the lock is
	// free.
	Holder int64
}

func (e *NotHolderError) Error() string {
	if e.Holder == 0 {
		return fmt.Sprintf("lease: force release %q fence %d: lock is free: %v", e.Lock, e.Revision, ErrNotFound)
	}
	return fmt.Sprintf("lease: force release %q fence %d: holder is fence %d: %v", e.Lock, e.Revision, e.Holder, ErrNotOwner)
}

// Is reports whether target is ErrNotOwner (the lock is held by another
// acquisition) or ErrNotFound (it is free).
func (e *NotHolderError) Is(target error) bool {
	if e.Holder == 0 {
		return target == ErrNotFound
	}
	return target == ErrNotOwner
}

// Admin holds the operator's tools over the lock records that Clients
// keep under one prefix: it reads any lock's state (Inspect, InspectAll),
// asks a holder to let go (RequestRelease) and deletes a holder's record
// (ForceRelease). It holds nothing and has no session: a tool (such as
// "fencekit status" or "fencekit release") needs no Client of its own, and
// a process that holds locks reaches the same tools through Client.Admin.
// Each call compares what it changes in one etcd transaction, so a holder
// that took over meanwhile is never touched.
//
// An Admin does not own its etcd client. It is safe for concurrent use.
type Admin struct {
	etcd   *clientv3.Client
	prefix string
	log    *slog.Logger
}

// NewAdmin returns an Admin of the records that Clients keep under prefix
// through cli: the prefix given to WithPrefix, or DefaultPrefix. A "/" is
// appended when missing, as WithPrefix does. Its log records (a force
// release, a release request) are discarded; Client.Admin's go to the
// Client's logger.
func NewAdmin(cli *clientv3.Client, prefix string) (*Admin, error) {
	v, err := NewVerifier(cli, prefix) // the same checks and prefix
	if err != nil {
		return nil, err
	}
	return &Admin{etcd: v.etcd, prefix: v.prefix, log: slog.New(slog.DiscardHandler)}, nil
}

// Admin returns an Admin of the records of c's prefix, through c's etcd
// client, logging to c's logger. It stays usable after c is closed, as
// long as the etcd client is open.
func (c *Client) Admin() *Admin {
	return &Admin{etcd: c.etcd, prefix: c.cfg.prefix, log: c.log}
}

// Inspect reads the state of the lock called name in one etcd request, plus
// one request per distinct session for the TTLs left. It holds nothing,
// writes nothing and needs only read access to the Admin's prefix. A lock
// nobody holds or waits for has a nil Holder and no Waiters.
func (a *Admin) Inspect(ctx context.Context, name string) (*LockState, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	resp, err := a.etcd.Get(ctx, lockDir(a.prefix, name), queueRecords()...)
	if err != nil {
		return nil, fmt.Errorf("lease: inspect %q: %w", name, errors.Join(rpcError(err), ctx.Err()))
	}
	states, err := a.states(ctx, resp.Kvs, resp.Header.Revision)
	if err != nil {
		return nil, fmt.Errorf("lease: inspect %q: %w", name, err)
	}
	if len(states) == 0 {
		return &LockState{Name: name, Revision: resp.Header.Revision}, nil
	}
	return &states[0], nil
}

// InspectAll reads the state of every lock that has a holder or a waiter
// under the Admin's prefix, sorted by name, as Inspect does for one.
func (a *Admin) InspectAll(ctx context.Context) ([]LockState, error) {
	resp, err := a.etcd.Get(ctx, a.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("lease: inspect all: %w", errors.Join(rpcError(err), ctx.Err()))
	}
	states, err := a.states(ctx, resp.Kvs, resp.Header.Revision)
	if err != nil {
		return nil, fmt.Errorf("lease: inspect all: %w", err)
	}
	return states, nil
}

// states groups records by lock, orders each queue by creation revision and
// reads the TTL left of each session.
func (a *Admin) states(ctx context.Context, kvs []*mvccpb.KeyValue, rev int64) ([]LockState, error) {
	byLock := map[string][]*mvccpb.KeyValue{}
	for _, kv := range kvs {
		key := string(kv.Key)
		rest := strings.TrimPrefix(key, a.prefix)
		if rest == key || strings.Count(rest, "/") != 1 || strings.HasPrefix(rest, "/") {
			continue // not a record key: <prefix><name>/<session>-<slot>
		}
		name := dirName(key)
		byLock[name] = append(byLock[name], kv)
	}
	ttls := map[int64]time.Duration{}
	for _, kv := range kvs {
		if _, ok := ttls[kv.Lease]; ok || kv.Lease == 0 {
			continue
		}
		ttl, err := sessionTTL(ctx, a.etcd, kv.Lease)
		if err != nil {
			return nil, err
		}
		ttls[kv.Lease] = ttl
	}
	states := make([]LockState, 0, len(byLock))
	now := time.Now()
	for name, recs := range byLock {
		states = append(states, lockState(name, recs, ttls, rev, now))
	}
	slices.SortFunc(states, func(a, b LockState) int { return strings.Compare(a.Name, b.Name) })
	return states, nil
}

// lockState is the state of the lock called name whose queue is recs,
// read at revision rev (at time now), with the TTLs of their leases. A
// lock-delay marker is not an acquisition: one whose record still exists
// sets that record's LockDelay, one whose record is gone delays the lock
// (DelayedUntil), and none is listed.
func lockState(name string, recs []*mvccpb.KeyValue, ttls map[int64]time.Duration, rev int64, now time.Time) LockState {
	slices.SortFunc(recs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	st := LockState{Name: name, Revision: rev}
	delays := map[int64]time.Duration{} // a record's creation revision -> its marker's delay
	for i, kv := range recs {
		if rec, ok := markerRecord(string(kv.Key)); ok {
			delays[kv.CreateRevision], _ = markerDelay(kv.Value)
			first := st.Holder == nil && len(st.Waiters) == 0
			ownRecord := func(r *mvccpb.KeyValue) bool { return string(r.Key) == rec && r.CreateRevision == kv.CreateRevision }
			if first && !slices.ContainsFunc(recs, ownRecord) {
				// Ahead of every record, and its own is gone: the lock
				// waits out its delay.
				if end := now.Add(max(ttls[kv.Lease], 0)); end.After(st.DelayedUntil) {
					st.DelayedUntil = end
				}
			}
			continue
		}
		r := newRecord(name, kv, ttls)
		if k, ok := kindOf(string(kv.Key)); ok {
			blockers, need, err := admission(k, recs[:i], kv.CreateRevision)
			r.Held = err == nil && len(blockers) < need
		}
		if st.Holder == nil && len(st.Waiters) == 0 && st.DelayedUntil.IsZero() {
			st.Holder = &r
		} else {
			st.Waiters = append(st.Waiters, r)
		}
	}
	if st.Holder != nil {
		st.Holder.LockDelay = delays[st.Holder.Fence.Revision]
	}
	for i := range st.Waiters {
		st.Waiters[i].LockDelay = delays[st.Waiters[i].Fence.Revision]
	}
	return st
}

// sessionTTL returns the TTL left of an etcd lease, or -1 when it no longer
// exists.
func sessionTTL(ctx context.Context, etcd clientv3.Lease, id int64) (time.Duration, error) {
	resp, err := etcd.TimeToLive(ctx, clientv3.LeaseID(id))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return -1, nil
	case err != nil:
		return 0, fmt.Errorf("session %x TTL: %w", id, errors.Join(rpcError(err), ctx.Err()))
	case resp.TTL < 0:
		return -1, nil
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

// newRecord describes kv without its owner token.
func newRecord(name string, kv *mvccpb.KeyValue, ttls map[int64]time.Duration) Record {
	r := Record{
		Fence:      fence.Token{Lock: name, Revision: kv.CreateRevision},
		Session:    kv.Lease,
		SessionTTL: -1,
		Key:        string(kv.Key),
	}
	if ttl, ok := ttls[kv.Lease]; ok {
		r.SessionTTL = ttl
	}
	if k, ok := kindOf(r.Key); ok {
		switch {
		case k.limit > 0:
			r.Kind = "semaphore/" + strconv.Itoa(k.limit)
		case k.shared:
			r.Kind = "read"
		default:
			r.Kind = "lock"
		}
	}
	tok, n, payload, ok := decodeRecord(kv.Value)
	if !ok {
		r.OwnerDigest = logattr.Hash(string(kv.Value))
		return r
	}
	r.Holds = n
	_, r.Value = decodePayload(payload)
	r.OwnerDigest = logattr.Hash(tok) // the same hash as owner.Token.Digest
	if t, err := owner.Parse(tok); err == nil {
		r.OwnerDigest = t.Digest()
		r.Instance = t.Instance()
		r.Since = t.Started()
	}
	return r
}

// ForceRelease is an operator's break-glass: it deletes the record of the
// acquisition of the lock called name whose fencing revision is rev, if and
// only if that acquisition holds the lock now. The delete is one etcd
// transaction comparing the record's creation revision, never the key
// alone, so a holder that took over meanwhile is never touched. The holder
// whose record it deletes sees its lease end with ErrKeyDeleted (within
// milliseconds, through its Client's watch), and the first waiter acquires.
//
// It returns what it deleted. When rev is not the current holder's it
// deletes nothing and returns a *NotHolderError (matching ErrNotOwner, or
// ErrNotFound when the lock is free). Any other error means the outcome is
// unknown; calling ForceRelease again is safe.
//
// ForceRelease does not stop the holder's side effects: a holder that is
// paused or partitioned keeps running until it notices. Only fencing at the
// resource stops its writes.
func (a *Admin) ForceRelease(ctx context.Context, name string, rev int64) (*Record, error) {
	kv, err := a.holder(ctx, "force release", name, rev)
	if err != nil {
		return nil, err
	}
	dir, key := lockDir(a.prefix, name), string(kv.Key)
	// The record at the head of the queue stays the head as long as it
	// exists (no record can be created ahead of it), so comparing its
	// creation revision is enough to know it still holds the lock. The
	// same transaction reads the record's lock-delay marker, if any.
	resp, err := a.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key, clientv3.WithPrevKV()), clientv3.OpGet(key+markerSep, clientv3.WithPrefix())).
		Else(clientv3.OpGet(dir, headRecord()...)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("lease: force release %q: outcome unknown: %w", name, errors.Join(rpcError(err), ctx.Err()))
	}
	if !resp.Succeeded {
		e := &NotHolderError{Lock: name, Revision: rev}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			e.Holder = kvs[0].CreateRevision
		}
		return nil, e
	}
	del := resp.Responses[0].GetResponseDeleteRange()
	if del.Deleted == 0 || len(del.PrevKvs) == 0 {
		return nil, &NotHolderError{Lock: name, Revision: rev}
	}
	r := newRecord(name, del.PrevKvs[0], nil)
	a.log.Warn("lease force released", logattr.Lock(name), slog.String("owner", r.OwnerDigest), logattr.Fence(rev),
		slog.Int("holds", r.Holds))
	if m := forcedMark(resp.Responses[1].GetResponseRange().Kvs, rev); m != nil {
		// Not a Release: the lock waits out the holder's lock-delay,
		// counted from now rather than from its session's end.
		r.LockDelay = m.delay
		discard := func(id clientv3.LeaseID, _ time.Duration) { _, _ = a.etcd.Revoke(ctx, id) } // or it expires
		if err := moveMarker(ctx, a.etcd, m, discard); err != nil {
			a.log.Warn("lease force release: lock-delay marker stays on its session's lease (it expires within the TTL plus the delay)",
				logattr.Lock(name), logattr.Fence(rev), slog.String("error", err.Error()))
		}
	}
	return &r, nil
}

// holder returns, for op, the record of the lock called name that holds
// it, if its fencing revision is rev; otherwise a *NotHolderError, or
// another error when it cannot tell.
func (a *Admin) holder(ctx context.Context, op, name string, rev int64) (*mvccpb.KeyValue, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if rev <= 0 {
		return nil, fmt.Errorf("lease: %s %q: fence revision %d is not positive", op, name, rev)
	}
	head, err := a.etcd.Get(ctx, lockDir(a.prefix, name), headRecord()...)
	var kv *mvccpb.KeyValue
	if err == nil && len(head.Kvs) > 0 {
		kv, err = resolveHead(ctx, a.etcd, head.Kvs[0]) // nil: a marker without its record
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("lease: %s %q: %w", op, name, errors.Join(rpcError(err), ctx.Err()))
	case kv == nil:
		return nil, &NotHolderError{Lock: name, Revision: rev}
	case kv.CreateRevision != rev:
		return nil, &NotHolderError{Lock: name, Revision: rev, Holder: kv.CreateRevision}
	}
	return kv, nil
}

// forcedMark is the lock-delay marker among kvs (a read of a record's
// markers) of the record created at rev, or nil.
func forcedMark(kvs []*mvccpb.KeyValue, rev int64) *delayMark {
	for _, kv := range kvs {
		d, ok := markerDelay(kv.Value)
		if ok && kv.CreateRevision == rev && isMarker(string(kv.Key)) {
			return &delayMark{key: string(kv.Key), value: string(kv.Value), delay: d, shadow: clientv3.LeaseID(kv.Lease)}
		}
	}
	return nil
}
