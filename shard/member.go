package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one member of a group: it is registered in etcd, campaigns to
// lead the group, and owns the shards the leader's assignment gives it.
// It is safe for concurrent use.
type Member struct {
	g    *Group
	name string
	ctx  context.Context // ends with Close
	stop context.CancelFunc

	bg      sync.WaitGroup // keeper, follower, campaigner
	workers sync.WaitGroup // shard workers (started only by the follower)
	shards  []*worker
	q       *queue
	once    sync.Once
	asks    chan struct{} // a slot per ask under way (see worker.ask)
	starts  chan struct{} // a slot per Acquire just started (see worker.acquire)
	resync  chan struct{} // capacity 1: the follower reads the assignment again

	mu       sync.Mutex // guards the fields below
	weight   int
	draining bool
	reg      clientv3.LeaseID // the registration's etcd lease
	owned    map[string]fence.Token
	assigned int           // shards the last assignment read gives this member
	changed  chan struct{} // closed and replaced when owned or assigned change
}

// Kind says whether an Event gains or loses a shard.
type Kind int

const (
	// Gained: the member owns the shard from now on, until its Lost
	// event; the event's Context is live.
	Gained Kind = iota + 1
	// Lost: the member no longer owns the shard. The event's Context (the
	// one its Gained event carried) was cancelled, with Err as its cause,
	// before anything let another member own the shard.
	Lost
)

// String returns "gained" or "lost".
func (k Kind) String() string {
	switch k {
	case Gained:
		return "gained"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Event is a shard gained or lost by a member.
type Event struct {
	// Kind is Gained or Lost.
	Kind Kind
	// Shard is the shard's name.
	Shard string
	// Fence is the shard's fencing token for this ownership: a token of
	// the shard's lock (Group.Lock), higher than every earlier owner's.
	Fence fence.Token
	// Context carries Fence (fence.FromContext, which guard.Transport and
	// the gRPC interceptors read; pass Fence to sqlguard) and the shard's
	// lease (lease.FromContext), and is cancelled, with the reason as its
	// cause, when the ownership ends: before the shard is released to its
	// successor, and before etcd could expire it for anyone else.
	Context context.Context
	// Err is, for Lost, why: ErrMoved (handed to another member), ErrLeft
	// (Close or Leave) or the lease's end (a *lease.LostError: the
	// session expired, renewals were not confirmed in time...). Nil for
	// Gained.
	Err error
}

// Join registers member (1 to 128 bytes, no "/", ":" or control
// characters) in the group with weight (1 to MaxWeight: its share of the
// shards is weight over the sum of the members' weights), and returns it
// once registered. ctx bounds the registration only. The member then owns
// the shards the group's leader assigns it, reported by Events, until
// Leave or Close. A name registered by a live member fails with
// ErrMemberExists; bad arguments with ErrInvalidConfig.
func (g *Group) Join(ctx context.Context, member string, weight int) (*Member, error) {
	if err := validName("member", member); err != nil {
		return nil, err
	}
	if weight < 1 || weight > MaxWeight {
		return nil, fmt.Errorf("%w: weight %d outside [1, %d]", ErrInvalidConfig, weight, MaxWeight)
	}
	m := &Member{g: g, name: member, weight: weight, owned: map[string]fence.Token{},
		changed: make(chan struct{}), q: newQueue(), asks: make(chan struct{}, maxAsks),
		starts: make(chan struct{}, maxStarts), resync: make(chan struct{}, 1)}
	m.ctx, m.stop = context.WithCancel(context.Background())
	id, ka, err := m.register(ctx, 0)
	if err != nil {
		m.stop()
		return nil, err
	}
	m.reg = id
	m.shards = make([]*worker, len(g.shards))
	for i := range m.shards {
		m.shards[i] = &worker{m: m, i: i, wake: make(chan struct{}, 1)}
	}
	m.bg.Add(3)
	go m.keep(ka)
	go m.follow()
	go m.campaign()
	go m.q.pump()
	g.cfg.log.Info("shard member joined", slog.String("group", g.name), slog.String("member", member), slog.Int("weight", weight))
	return m, nil
}

// maxAsks bounds the asks a member makes at once.
const maxAsks = 16

// maxStarts bounds the Acquire calls a member starts per 20 ms.
const maxStarts = 64

// Name returns the member's name.
func (m *Member) Name() string { return m.name }

// Events returns the member's stream of gained and lost shards, in order
// for each shard (Gained, then Lost, then perhaps Gained again). The
// stream is buffered without bound, so the member never waits for its
// reader; receive until the channel is closed, after Leave or Close,
// since undelivered events stay in memory.
func (m *Member) Events() <-chan Event { return m.q.out }

// Owned returns the shards the member owns now, with their fencing
// tokens.
func (m *Member) Owned() map[string]fence.Token {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]fence.Token, len(m.owned))
	for s, t := range m.owned {
		out[s] = t
	}
	return out
}

// SetWeight changes the member's weight (1 to MaxWeight); the leader
// rebalances by hand-off. It returns ErrInvalidConfig for a bad weight
// and ErrLeft after Leave or Close.
func (m *Member) SetWeight(ctx context.Context, weight int) error {
	if weight < 1 || weight > MaxWeight {
		return fmt.Errorf("%w: weight %d outside [1, %d]", ErrInvalidConfig, weight, MaxWeight)
	}
	m.mu.Lock()
	m.weight = weight
	m.mu.Unlock()
	return m.update(ctx)
}

// Leave drains the member: it marks itself draining, so that the leader
// assigns its shards to the others, hands each over as its successor asks
// for it (no overlap, no gap beyond one etcd watch event), and once it
// owns none and is assigned none, Closes. ctx bounds the drain: when it
// ends first, Leave Closes anyway and returns ctx's error joined with
// Close's. A member left alone in its group gives its shards up to
// nobody.
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	m.draining = true
	m.mu.Unlock()
	err := m.update(ctx)
	for err != nil && !errors.Is(err, ErrLeft) && ctx.Err() == nil {
		// A connection error (a link that just healed): try again.
		sleep(ctx, 100*time.Millisecond)
		err = m.update(ctx)
	}
	for err == nil {
		m.mu.Lock()
		done, ch := len(m.owned) == 0 && m.assigned == 0, m.changed
		m.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		case <-m.ctx.Done():
			err = ErrLeft
		}
	}
	return errors.Join(err, m.Close())
}

// Close leaves the group at once: every shard's context is cancelled
// (cause ErrLeft) and its lock released, the registration is revoked
// (the leader then reassigns the shards, which their new owners take
// without waiting for a TTL), and the leadership, if held, is resigned.
// The lease.Client and etcd client stay open. Later calls return nil.
func (m *Member) Close() error {
	var err error
	m.once.Do(func() {
		m.stop()
		m.bg.Wait()
		m.workers.Wait()
		m.mu.Lock()
		id := m.reg
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), m.g.cfg.ttl)
		// A registration that expired (a pause longer than the TTL) is
		// gone already.
		if _, rerr := m.g.etcd.Revoke(ctx, id); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("shard: member %q: revoke registration (it expires within the TTL): %w", m.name, rerr)
		}
		cancel()
		m.q.close()
		m.g.cfg.log.Info("shard member left", slog.String("group", m.g.name), slog.String("member", m.name))
	})
	return err
}

// value is the member's registration value.
func (m *Member) value() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, _ := json.Marshal(memberValue{Weight: m.weight, Draining: m.draining})
	return string(b)
}

// register writes the member's registration under a new etcd lease and
// starts its keep-alives. prev is the lease of a registration this member
// wrote before (0 at Join): a registration still attached to it is taken
// over, any other is another member's (ErrMemberExists).
func (m *Member) register(ctx context.Context, prev clientv3.LeaseID) (clientv3.LeaseID, <-chan *clientv3.LeaseKeepAliveResponse, error) {
	key := m.g.memberKey(m.name)
	grant, err := m.g.etcd.Grant(ctx, int64((m.g.cfg.ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, nil, fmt.Errorf("shard: member %q: grant: %w", m.name, err)
	}
	free := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if prev != 0 {
		free = clientv3.Compare(clientv3.LeaseValue(key), "=", prev)
	}
	resp, err := m.g.etcd.Txn(ctx).If(free).Then(clientv3.OpPut(key, m.value(), clientv3.WithLease(grant.ID))).Commit()
	if err == nil && !resp.Succeeded && prev != 0 {
		resp, err = m.g.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, m.value(), clientv3.WithLease(grant.ID))).Commit()
	}
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%w: %q in group %q", ErrMemberExists, m.name, m.g.name)
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = m.g.etcd.Revoke(rctx, grant.ID)
		cancel()
		return 0, nil, fmt.Errorf("shard: member %q: register: %w", m.name, err)
	}
	ka, err := m.g.etcd.KeepAlive(m.ctx, grant.ID)
	if err != nil {
		return 0, nil, fmt.Errorf("shard: member %q: keep-alive: %w", m.name, err)
	}
	return grant.ID, ka, nil
}

// keep drains the registration's keep-alive replies and registers again
// when they end before Close (the registration expired: a pause or a
// partition longer than the TTL).
func (m *Member) keep(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer m.bg.Done()
	for {
		for range ka {
		}
		if m.ctx.Err() != nil {
			return
		}
		m.g.cfg.log.Warn("shard member registration lost; registering again", slog.String("group", m.g.name), slog.String("member", m.name))
		for {
			m.mu.Lock()
			prev := m.reg
			m.mu.Unlock()
			ctx, cancel := context.WithTimeout(m.ctx, m.g.cfg.ttl)
			id, next, err := m.register(ctx, prev)
			cancel()
			if err == nil {
				m.mu.Lock()
				m.reg = id
				m.mu.Unlock()
				ka = next
				// The link was down for a TTL: a watch on it may have
				// stalled without failing.
				notify(m.resync)
				break
			}
			m.g.cfg.log.Warn("shard member registration failed", slog.String("group", m.g.name), slog.String("member", m.name), slog.String("error", err.Error()))
			if !sleep(m.ctx, 500*time.Millisecond) {
				return
			}
		}
	}
}

// update writes the member's weight and draining flag to its
// registration.
func (m *Member) update(ctx context.Context) error {
	if m.ctx.Err() != nil {
		return ErrLeft
	}
	m.mu.Lock()
	id := m.reg
	m.mu.Unlock()
	key := m.g.memberKey(m.name)
	resp, err := m.g.etcd.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", id)).
		Then(clientv3.OpPut(key, m.value(), clientv3.WithLease(id))).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("shard: member %q: update registration: %w", m.name, err)
	case !resp.Succeeded:
		// The registration expired: the keeper writes the new value when
		// it registers again.
		m.g.cfg.log.Warn("shard member update found no registration", slog.String("group", m.g.name), slog.String("member", m.name))
	}
	return nil
}

// follow reads the group's assignment and every change of it, and tells
// each shard's worker whether the member should own it.
func (m *Member) follow() {
	defer m.bg.Done()
	key := m.g.assignKey()
	for m.ctx.Err() == nil {
		gctx, gcancel := context.WithTimeout(m.ctx, m.g.cfg.ttl)
		resp, err := m.g.etcd.Get(gctx, key)
		gcancel()
		if err != nil {
			sleep(m.ctx, 200*time.Millisecond)
			continue
		}
		var v []byte
		if len(resp.Kvs) > 0 {
			v = resp.Kvs[0].Value
		}
		m.apply(v)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
		m.watch(m.g.etcd.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)))
		cancel()
		sleep(m.ctx, 50*time.Millisecond)
	}
}

// watch applies the assignment's changes from wch until it fails or the
// keeper asks for a fresh read.
func (m *Member) watch(wch clientv3.WatchChan) {
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					m.apply(nil)
				} else {
					m.apply(ev.Kv.Value)
				}
			}
		case <-m.resync:
			return
		}
	}
}

// apply hands an assignment value to the workers.
func (m *Member) apply(v []byte) {
	owners, _, err := m.g.decode(v)
	if err != nil {
		m.g.cfg.log.Error("shard assignment ignored", slog.String("group", m.g.name), slog.String("member", m.name), slog.String("error", err.Error()))
		return
	}
	mine := 0
	for i, o := range owners {
		if o == m.name {
			mine++
		}
		m.shards[i].set(o == m.name, o)
	}
	m.mu.Lock()
	m.assigned = mine
	m.signal()
	m.mu.Unlock()
}

// signal wakes Leave. m.mu is held.
func (m *Member) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// gained and lost keep the owned set and its metric.
func (m *Member) gained(s string, t fence.Token) {
	m.mu.Lock()
	m.owned[s] = t
	m.signal()
	m.mu.Unlock()
	m.g.met.owned.WithLabelValues(m.g.name, m.name).Inc()
}

func (m *Member) lost(s string) {
	m.mu.Lock()
	delete(m.owned, s)
	m.signal()
	m.mu.Unlock()
	m.g.met.owned.WithLabelValues(m.g.name, m.name).Dec()
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// queue is an unbounded queue of events with one reader.
type queue struct {
	mu     sync.Mutex
	items  []Event
	closed bool
	wake   chan struct{}
	out    chan Event
}

func newQueue() *queue { return &queue{wake: make(chan struct{}, 1), out: make(chan Event)} }

func (q *queue) push(e Event) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	notify(q.wake)
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	notify(q.wake)
}

// pump delivers the queue's events in order, and closes out after the
// last one once the queue is closed.
func (q *queue) pump() {
	for {
		q.mu.Lock()
		items, closed := q.items, q.closed
		q.items = nil
		q.mu.Unlock()
		for _, e := range items {
			q.out <- e
		}
		if len(items) == 0 {
			if closed {
				close(q.out)
				return
			}
			<-q.wake
		}
	}
}

// notify wakes whoever waits on ch (capacity 1) without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
