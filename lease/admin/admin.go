package admin

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
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/owner"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	// lease.WithLockDelay) after a holder vanished without releasing, about when
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
	// Holds is the hold count (1 plus one per lease.Reenter not yet released),
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
	// lease.RWMutex) or "semaphore/N" (a permit of a semaphore of N); "" for a
	// record no fencekit Client wrote.
	Kind string
	// Held reports whether the record holds the lock: the head of the
	// queue for a lock, every record with no write lock ahead for a read
	// lock, the first N for a semaphore of N.
	Held bool
	// Value is an election candidate's public value, or the metadata of an
	// acquisition (lease.WithMetadata); "" otherwise. It is the holder's to
	// write: treat it as untrusted text.
	Value string
	// LockDelay is the acquisition's lock-delay (lease.WithLockDelay): how long
	// the lock will wait after its record vanishes without a Release; 0
	// when none.
	LockDelay time.Duration
}

// Admin holds the operator's tools over the lock records that
// lease.Clients keep under one prefix: it reads any lock's state (Inspect,
// InspectAll), asks a holder to let go (RequestRelease) and deletes a
// holder's record (ForceRelease). It holds nothing and has no session: a
// tool (such as "fencekit status" or "fencekit release") needs no
// lease.Client of its own, and a process that holds locks makes one from
// its etcd client and its Client's prefix (lease.Client.Prefix).
// Each call compares what it changes in one etcd transaction, so a holder
// that took over meanwhile is never touched.
//
// An Admin does not own its etcd client. It is safe for concurrent use.
type Admin struct {
	etcd   *clientv3.Client
	prefix string
	log    *slog.Logger
}

// New returns an Admin of the records that lease.Clients keep under
// prefix through cli: the prefix given to lease.WithPrefix, or
// lease.DefaultPrefix. A "/" is appended when missing, as WithPrefix does.
// Its log records (a force release, a release request) go to the logger
// of WithLogger, and are discarded without it.
func New(cli *clientv3.Client, prefix string, opts ...Option) (*Admin, error) {
	if cli == nil {
		return nil, errors.New("lease/admin: nil etcd client")
	}
	prefix, err := record.Prefix(prefix)
	if err != nil {
		return nil, err
	}
	a := &Admin{etcd: cli, prefix: prefix, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if err := o.apply(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Inspect reads the state of the lock called name in one etcd request, plus
// one request per distinct session for the TTLs left. It holds nothing,
// writes nothing and needs only read access to the Admin's prefix. A lock
// nobody holds or waits for has a nil Holder and no Waiters.
func (a *Admin) Inspect(ctx context.Context, name string) (*LockState, error) {
	if err := lease.ValidateName(name); err != nil {
		return nil, err
	}
	resp, err := a.etcd.Get(ctx, record.Dir(a.prefix, name), record.QueueRecords()...)
	if err != nil {
		return nil, fmt.Errorf("lease: inspect %q: %w", name, errors.Join(record.RPCError(err), ctx.Err()))
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
		return nil, fmt.Errorf("lease: inspect all: %w", errors.Join(record.RPCError(err), ctx.Err()))
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
		name := record.DirName(key)
		byLock[name] = append(byLock[name], kv)
	}
	ttls := map[int64]time.Duration{}
	for _, kv := range kvs {
		if _, ok := ttls[kv.Lease]; ok || kv.Lease == 0 {
			continue
		}
		ttl, err := record.SessionTTL(ctx, a.etcd, kv.Lease)
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
		if rec, ok := record.MarkerRecord(string(kv.Key)); ok {
			delays[kv.CreateRevision], _ = record.MarkerDelay(kv.Value)
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
		if k, ok := record.KindOf(string(kv.Key)); ok {
			blockers, need, err := record.Admission(k, recs[:i], kv.CreateRevision)
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
	if k, ok := record.KindOf(r.Key); ok {
		switch {
		case k.Limit > 0:
			r.Kind = "semaphore/" + strconv.Itoa(k.Limit)
		case k.Shared:
			r.Kind = "read"
		default:
			r.Kind = "lock"
		}
	}
	tok, n, payload, ok := record.Decode(kv.Value)
	if !ok {
		r.OwnerDigest = logattr.Hash(string(kv.Value))
		return r
	}
	r.Holds = n
	_, r.Value = record.DecodePayload(payload)
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
// whose record it deletes sees its lease end with lease.ErrKeyDeleted (within
// milliseconds, through its Client's watch), and the first waiter acquires.
//
// It returns what it deleted. When rev is not the current holder's it
// deletes nothing and returns a *lease.NotHolderError (matching lease.ErrNotOwner, or
// lease.ErrNotFound when the lock is free). Any other error means the outcome is
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
	dir, key := record.Dir(a.prefix, name), string(kv.Key)
	// The record at the head of the queue stays the head as long as it
	// exists (no record can be created ahead of it), so comparing its
	// creation revision is enough to know it still holds the lock. The
	// same transaction reads the record's lock-delay marker, if any.
	resp, err := a.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key, clientv3.WithPrevKV()), clientv3.OpGet(key+record.MarkerSep, clientv3.WithPrefix())).
		Else(clientv3.OpGet(dir, record.HeadRecord()...)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("lease: force release %q: outcome unknown: %w", name, errors.Join(record.RPCError(err), ctx.Err()))
	}
	if !resp.Succeeded {
		e := &lease.NotHolderError{Lock: name, Revision: rev}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			e.Holder = kvs[0].CreateRevision
		}
		return nil, e
	}
	del := resp.Responses[0].GetResponseDeleteRange()
	if del.Deleted == 0 || len(del.PrevKvs) == 0 {
		return nil, &lease.NotHolderError{Lock: name, Revision: rev}
	}
	r := newRecord(name, del.PrevKvs[0], nil)
	a.log.Warn("lease force released", logattr.Lock(name), slog.String("owner", r.OwnerDigest), logattr.Fence(rev),
		slog.Int("holds", r.Holds))
	if m := record.ForcedMark(resp.Responses[1].GetResponseRange().Kvs, rev); m != nil {
		// Not a Release: the lock waits out the holder's lock-delay,
		// counted from now rather than from its session's end.
		r.LockDelay = m.Delay
		discard := func(id clientv3.LeaseID, _ time.Duration) { _, _ = a.etcd.Revoke(ctx, id) } // or it expires
		if err := record.MoveMarker(ctx, a.etcd, m, discard); err != nil {
			a.log.Warn("lease force release: lock-delay marker stays on its session's lease (it expires within the TTL plus the delay)",
				logattr.Lock(name), logattr.Fence(rev), slog.String("error", err.Error()))
		}
	}
	return &r, nil
}

// holder returns, for op, the record of the lock called name that holds
// it, if its fencing revision is rev; otherwise a *lease.NotHolderError, or
// another error when it cannot tell.
func (a *Admin) holder(ctx context.Context, op, name string, rev int64) (*mvccpb.KeyValue, error) {
	if err := lease.ValidateName(name); err != nil {
		return nil, err
	}
	if rev <= 0 {
		return nil, fmt.Errorf("lease: %s %q: fence revision %d is not positive", op, name, rev)
	}
	head, err := a.etcd.Get(ctx, record.Dir(a.prefix, name), record.HeadRecord()...)
	var kv *mvccpb.KeyValue
	if err == nil && len(head.Kvs) > 0 {
		kv, err = record.ResolveHead(ctx, a.etcd, head.Kvs[0]) // nil: a marker without its record
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("lease: %s %q: %w", op, name, errors.Join(record.RPCError(err), ctx.Err()))
	case kv == nil:
		return nil, &lease.NotHolderError{Lock: name, Revision: rev}
	case kv.CreateRevision != rev:
		return nil, &lease.NotHolderError{Lock: name, Revision: rev, Holder: kv.CreateRevision}
	}
	return kv, nil
}

// RequestRelease asks the holder of the lock called name whose fencing
// revision is rev to release it: the cooperative counterpart of
// ForceRelease. The holder's lease.Lease.ReleaseRequested closes (within the time
// an etcd watch event takes), lease.Client.Do cancels its function's context with
// lease.ErrReleaseRequested and then releases; a holder that uses Acquire decides
// itself what to do. Nothing is taken away: a holder that ignores the
// request keeps the lock.
//
// The request is a key under the prefix's reserved "/asks/" space (no lock
// name is empty, so it is never part of a lock), attached to the holder's
// session so that it goes with it. It is written only if the acquisition
// with revision rev still holds the lock, in one transaction comparing its
// record's creation revision. When rev is not the current holder's it
// writes nothing and returns a *lease.NotHolderError (matching lease.ErrNotOwner, or
// lease.ErrNotFound when the lock is free). A record that no session keeps
// cannot be asked: use ForceRelease. Any other error means the outcome is
// unknown; asking again is harmless.
func (a *Admin) RequestRelease(ctx context.Context, name string, rev int64) error {
	kv, err := a.holder(ctx, "request release", name, rev)
	if err != nil {
		return err
	}
	if kv.Lease == 0 {
		return fmt.Errorf("lease: request release %q: the record is kept by no session, so no Client can hear the request; use ForceRelease", name)
	}
	key := string(kv.Key)
	ask := record.AskKey(a.prefix, key, rev)
	resp, err := a.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpPut(ask, key, clientv3.WithLease(clientv3.LeaseID(kv.Lease)))).
		Commit()
	switch {
	case err != nil:
		return fmt.Errorf("lease: request release %q: outcome unknown: %w", name, errors.Join(record.RPCError(err), ctx.Err()))
	case !resp.Succeeded:
		return &lease.NotHolderError{Lock: name, Revision: rev}
	}
	a.log.Info("lease release requested", logattr.Lock(name), logattr.Fence(rev))
	return nil
}
