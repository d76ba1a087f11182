package lease

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/lease/internal/resend"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxValueLen is the longest public value of an election candidate, in
// bytes.
const MaxValueLen = 4096

// ErrNoLeader reports that an election has no leader at the moment.
// Election.Leader returns it as a *NoLeaderError.
var ErrNoLeader = errors.New("lease: no leader")

// NoLeaderError is the error of Election.Leader when nobody leads the
// election: nobody campaigns, or the election waits out a lock-delay. It
// matches ErrNoLeader.
type NoLeaderError struct {
	// Election is the election's name.
	Election string
	// DelayedUntil is, while the election waits out a lock-delay (a
	// Lease acquired WithLockDelay led it and vanished without a
	// Release), about when the delay ends and the next candidate may
	// lead, as admin.LockState.DelayedUntil reckons it; zero otherwise.
	DelayedUntil time.Time
}

func (e *NoLeaderError) Error() string {
	if e.DelayedUntil.IsZero() {
		return ErrNoLeader.Error()
	}
	return fmt.Sprintf("%v, lock-delay until ~%s", ErrNoLeader, e.DelayedUntil.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrNoLeader.
func (e *NoLeaderError) Is(target error) bool { return target == ErrNoLeader }

// Election elects one leader among the Clients that campaign under its
// name, and tells anyone who asks who it is. Candidates queue like
// waiters for a Lease (FIFO across processes); the head of the queue leads.
// Each candidate publishes a public value (an address, a pod name) with its
// record; the owner token stays private.
//
// A leader's term is a fenced Lease: terms increase strictly (the term is
// the fencing token), and a leader's Done closes, and its Context is
// cancelled with the cause, a safety margin before the server could expire
// its session, so before another candidate can lead. Send the term with
// every write a leader makes (guard, sqlguard): a deposed leader that
// paused is then refused by the resource, which a lease alone cannot do.
//
// An Election is a small value bound to its Client, safe for concurrent
// use; it costs nothing until Campaign, Leader or Observe.
type Election struct {
	c    *Client
	name string
}

// Election returns the election called name. It does no I/O, and returns
// an error matching ErrInvalidName for a bad name. An election shares its
// name space with Leases: Client.Acquire of the same name queues with the
// candidates.
func (c *Client) Election(name string) (*Election, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return &Election{c: c, name: name}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Leader is who leads an election.
type Leader struct {
	// Value is the public value the leader published.
	Value string
	// Term is the leader's term: the fencing token of its record.
	Term fence.Token
	// Since is when it became leader, by its own clock; zero until it
	// published that (right after winning).
	Since time.Time
	// Gap is set only on a Leader that Observe yields after a gap in what
	// it could read: etcd had compacted away history that Observe had not
	// read yet (see Observe). Leaders between the one yielded before and
	// this one may be missing. Leader never sets it.
	Gap bool
	// DelayedUntil is set only on a zero Leader (no leader) that Observe
	// yields while the election waits out a lock-delay: a Lease acquired
	// WithLockDelay led it and vanished without a Release, and nobody
	// leads until about then (see NoLeaderError). Observe yields it when
	// that term ends.
	DelayedUntil time.Time

	key string // its record's key
}

// IsZero reports whether l is the zero Leader: no leader.
func (l Leader) IsZero() bool { return l.Term.Revision == 0 }

// Campaign blocks until this candidate leads the election, publishing
// value (at most MaxValueLen bytes of UTF-8) for Leader and Observe, and
// returns its term. ctx bounds only the wait; on error nothing is left
// behind. Errors are as for Client.Acquire; a term that ended before
// Campaign could return it (lost while publishing its start) is an error
// matching ErrRetryable and ErrLost, never a returned Term. Of the
// AcquireOptions only WithLeaseTTL applies (the others are an error
// matching ErrInvalidOption): the term's TTL, how long the election waits
// for a leader that stopped.
func (e *Election) Campaign(ctx context.Context, value string, opts ...AcquireOption) (*Term, error) {
	if err := validValue(value); err != nil {
		return nil, err
	}
	req, err := withTTLOnly(request{name: e.name, kind: record.Exclusive, payload: record.EncodePayload(time.Time{}, value), op: "campaign"}, opts)
	if err != nil {
		return nil, err
	}
	l, err := e.c.acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	t := &Term{l: l, since: l.acquired}
	// Publish when the term began. Best effort: if the reply is lost the
	// term still stands, Since reads zero until a later Proclaim, and the
	// next call on the term settles the lost one.
	err = l.change(ctx, opProclaim, record.EncodePayload(t.since, value))
	if err == nil || errors.Is(err, ErrOutcomeUnknown) {
		err = nil
		if lerr := l.Err(); lerr != nil {
			// The term ended meanwhile (its session's deadline passed
			// while the Proclaim waited, say): it leads nothing, so say
			// so rather than return it.
			err = opErr("campaign", e.name, lerr)
		}
	}
	if err != nil {
		if l.Err() == nil {
			// Proclaim refused: give the lock up rather than hold it for
			// nobody.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.cfg.ttl)
			_ = l.Release(rctx)
			cancel()
		}
		if ctx.Err() == nil && !permanent(err) {
			err = retryable(err)
		}
		return nil, err
	}
	e.c.met.Leading.Inc()
	e.c.met.Terms.Inc()
	context.AfterFunc(l.fin.Context(), e.c.met.Leading.Dec)
	return t, nil
}

// Run campaigns with value, runs fn while leading with a context that
// carries the term's fencing token and is cancelled the moment the term
// ends, and resigns when fn returns. Its result is as for Client.Do: fn's
// error joined with the term's *LostError if the term was lost, or with
// the Resign error; a loop can retry while it matches ErrRetryable.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, t *Term) error) (err error) {
	t, err := e.Campaign(ctx, value)
	if err != nil {
		return err
	}
	return t.l.c.run(ctx, t.l, func(ctx context.Context) error { return fn(ctx, t) })
}

// Leader returns who leads the election now, or a *NoLeaderError
// (matching ErrNoLeader) when nobody does: also during a lock-delay, when
// the error says about when the delay ends. It is one etcd read, two when
// a lock-delay marker heads the queue, three during the delay.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	resp, err := e.c.etcd.Get(ctx, record.Dir(e.c.cfg.prefix, e.name), record.HeadRecord()...)
	if err != nil {
		return Leader{}, opErr("leader", e.name, record.RPCError(err))
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, opErr("leader", e.name, &NoLeaderError{Election: e.name})
	}
	head, err := record.ResolveHead(ctx, e.c.etcd, resp.Kvs[0])
	if err != nil {
		return Leader{}, opErr("leader", e.name, errors.Join(record.RPCError(err), ctx.Err()))
	}
	if head == nil {
		until := e.c.delayEnd(ctx, resp.Kvs[0])
		return Leader{}, opErr("leader", e.name, &NoLeaderError{Election: e.name, DelayedUntil: until})
	}
	return e.leaderOf(head), nil
}

// Observe returns the sequence of the election's leaders: the current one
// first (the zero Leader if none), then every change, in the order etcd
// applied them; a new published value (Proclaim) is a change too. A term
// that ends with a lock-delay (see WithLockDelay) is followed by a zero
// Leader with DelayedUntil set, and its end by the next leader, or by a
// zero Leader. It reads
// the election's queue once, then follows it through one watch from that
// revision on, deriving each leader from the watch's own events, so it
// never coalesces changes however often etcd compacts its history.
//
// Only a watch that has to resume from a revision etcd has already
// compacted away misses history: after its link to etcd was cut, or when
// it fell so far behind that etcd dropped its position (etcd answers such a
// watch "compacted"). Observe then reads the queue anew and yields the
// leader it finds with Gap set, even if that leader is the one it yielded
// last: leaders between the two may be missing. Without such a gap no
// yielded Leader has Gap set.
//
// It ends when ctx ends or the loop stops; etcd errors are retried every
// 50 ms. Each Observe costs one watch of the election's directory and
// keeps that directory's records (the queue of candidates) in memory.
func (e *Election) Observe(ctx context.Context) iter.Seq[Leader] {
	return func(yield func(Leader) bool) {
		o := &observer{e: e, dir: record.Dir(e.c.cfg.prefix, e.name), yield: yield, first: true}
		for ctx.Err() == nil {
			if !o.watch(ctx) {
				return
			}
			if !resend.Sleep(ctx, nil, 50*time.Millisecond) {
				return
			}
		}
	}
}

// observer follows an election's queue for Observe: a copy of its
// directory as of revision rev, kept current from one watch's events.
type observer struct {
	e     *Election
	dir   string
	yield func(Leader) bool

	recs  map[string]*mvccpb.KeyValue // the directory at rev
	head  *mvccpb.KeyValue            // the record of lowest creation revision
	rev   int64                       // 0: recs must be read anew
	last  Leader                      // the leader last yielded
	first bool                        // nothing yielded yet
	gap   bool                        // history was compacted away unread
	delay observedDelay               // the lock-delay last read
}

// observedDelay is the end of a lock-delay as read for the marker at key
// on the etcd lease id.
type observedDelay struct {
	key   string
	lease int64
	until time.Time
}

// watch runs one watch of the directory: from rev+1 when recs is current,
// else from now after reading the directory. It returns when the watch
// ends (false if yield said stop).
func (o *observer) watch(ctx context.Context) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if o.rev > 0 {
		opts = append(opts, clientv3.WithRev(o.rev+1))
	} else {
		// Watch first, then read: every change after the read is then
		// in the watch.
		opts = append(opts, clientv3.WithCreatedNotify())
	}
	wch := o.e.c.etcd.Watch(wctx, o.dir, opts...)
	if o.rev == 0 {
		if created, ok := <-wch; !ok || created.Err() != nil || !o.read(wctx) {
			return true
		}
		if !o.emit(wctx) {
			return false
		}
	}
	for resp := range wch {
		if resp.CompactRevision != 0 {
			// The history from rev+1 is gone: read the present.
			o.rev, o.gap = 0, !o.first
			return true
		}
		if resp.Err() != nil {
			return true
		}
		if !o.apply(wctx, resp.Events) {
			return false
		}
	}
	return true
}

// read replaces recs with the directory as it is now.
func (o *observer) read(ctx context.Context) bool {
	resp, err := o.e.c.etcd.Get(ctx, o.dir, clientv3.WithPrefix())
	if err != nil {
		return false
	}
	o.recs, o.head = make(map[string]*mvccpb.KeyValue, len(resp.Kvs)), nil
	for _, kv := range resp.Kvs {
		o.put(kv)
	}
	o.rev = resp.Header.Revision
	return true
}

// apply applies a watch response's events revision by revision, yielding
// the leader after each revision that changed it. Events at or below rev
// (already in the read that began the watch) are skipped.
func (o *observer) apply(ctx context.Context, evs []*clientv3.Event) bool {
	for i, ev := range evs {
		if ev.Kv.ModRevision <= o.rev {
			continue
		}
		if ev.Type == mvccpb.DELETE {
			o.del(string(ev.Kv.Key))
		} else {
			o.put(ev.Kv)
		}
		if i+1 < len(evs) && evs[i+1].Kv.ModRevision == ev.Kv.ModRevision {
			continue // one transaction: yield its outcome only
		}
		o.rev = ev.Kv.ModRevision
		if !o.emit(ctx) {
			return false
		}
	}
	return true
}

func (o *observer) put(kv *mvccpb.KeyValue) {
	o.recs[string(kv.Key)] = kv
	if o.head == nil || kv.CreateRevision <= o.head.CreateRevision || string(kv.Key) == string(o.head.Key) {
		o.head = kv
	}
}

func (o *observer) del(key string) {
	delete(o.recs, key)
	if o.head == nil || string(o.head.Key) != key {
		return
	}
	o.head = nil
	for _, kv := range o.recs {
		if o.head == nil || kv.CreateRevision < o.head.CreateRevision {
			o.head = kv
		}
	}
}

// emit yields the leader if it changed, or after a gap.
func (o *observer) emit(ctx context.Context) bool {
	ldr := o.leader(ctx)
	if !o.first && !o.gap && ldr == o.last {
		return true
	}
	ldr.Gap, o.gap = o.gap, false
	o.first, o.last = false, ldr
	o.last.Gap = false
	return o.yield(ldr)
}

// leader is the leader recs name: their head's, or none, with the end of
// the delay when the head is a lock-delay marker whose record is gone. A
// marker shares its record's creation revision, so either may be head.
func (o *observer) leader(ctx context.Context) Leader {
	if o.head == nil {
		return Leader{}
	}
	rec, ok := record.MarkerRecord(string(o.head.Key))
	if !ok {
		return o.e.leaderOf(o.head)
	}
	if kv := o.recs[rec]; kv != nil && kv.CreateRevision == o.head.CreateRevision {
		return o.e.leaderOf(kv)
	}
	if d := o.delay; d.key != string(o.head.Key) || d.lease != o.head.Lease {
		// A marker read anew, or moved to a lease of its own when its
		// countdown started (see expireMarker): read its TTL.
		o.delay = observedDelay{key: string(o.head.Key), lease: o.head.Lease, until: o.e.c.delayEnd(ctx, o.head)}
	}
	return Leader{DelayedUntil: o.delay.until}
}

// leaderOf decodes the record that heads an election's queue.
func (e *Election) leaderOf(kv *mvccpb.KeyValue) Leader {
	_, _, payload, _ := record.Decode(kv.Value)
	since, value := record.DecodePayload(payload)
	return Leader{Value: value, Term: fence.Token{Lock: e.name, Revision: kv.CreateRevision}, Since: since, key: string(kv.Key)}
}
