package shard

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// campaign runs for the group's leadership until the member closes.
func (m *Member) campaign() {
	defer m.bg.Done()
	el, err := m.g.locks.Election(m.g.election())
	if err != nil { // the group's name was validated: cannot happen
		m.g.cfg.log.Error("shard election", slog.String("group", m.g.name), slog.String("error", err.Error()))
		return
	}
	for m.ctx.Err() == nil {
		err := el.Run(m.ctx, m.name, m.lead)
		if m.ctx.Err() == nil {
			m.g.cfg.log.Info("shard leadership ended", slog.String("group", m.g.name), slog.String("member", m.name), slog.Any("error", err))
			sleep(m.ctx, 100*time.Millisecond)
		}
	}
}

// leader is a term's state: the assignment it wrote last and the members
// it sees.
type leader struct {
	m       *Member
	term    *lease.Term
	cond    clientv3.Cmp // holds while the term does
	owners  []string     // the stored assignment
	modRev  int64        // its key's mod revision, 0 when absent
	members map[string]MemberInfo
}

// lead keeps the group's assignment while m leads: it writes a new plan
// (see plan) whenever the membership changes and then stays unchanged for
// the settle time, each write conditioned on the term in the same etcd
// transaction, so a deposed leader's plan is never stored.
func (m *Member) lead(ctx context.Context, t *lease.Term) error {
	g := m.g
	cond, _, err := g.locks.Verifier().Condition(ctx, t.Fence())
	if err != nil {
		return err
	}
	l := &leader{m: m, term: t, cond: cond}
	if err := l.read(ctx); err != nil {
		return err
	}
	g.cfg.log.Info("shard group led", slog.String("group", g.name), slog.String("member", m.name), slog.Int64("term", t.Fence().Revision))
	for ctx.Err() == nil {
		ms, rev, err := g.members(ctx)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		l.members = map[string]MemberInfo{}
		for _, mi := range ms {
			l.members[mi.Name] = mi
		}
		l.watch(ctx, rev)
	}
	return nil
}

// read reads the stored assignment.
func (l *leader) read(ctx context.Context) error {
	g := l.m.g
	resp, err := g.etcd.Get(ctx, g.assignKey())
	if err != nil {
		return err
	}
	l.modRev = 0
	var v []byte
	if len(resp.Kvs) > 0 {
		v, l.modRev = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
	}
	owners, _, err := g.decode(v)
	if errors.Is(err, ErrMismatch) {
		// Written for other shards: replan from nothing.
		g.cfg.log.Error("shard assignment replaced", slog.String("group", g.name), slog.String("error", err.Error()))
		owners, err = make([]string, len(g.shards)), nil
	}
	l.owners = owners
	return err
}

// watch follows the membership from revision rev+1 and writes a plan
// after each change settles, until the watch fails (the caller reads the
// members again) or ctx ends.
func (l *leader) watch(ctx context.Context, rev int64) {
	g := l.m.g
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := g.etcd.Watch(wctx, g.membersDir(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	// Plan once the members seen so far settle (a new leader, or one
	// whose watch failed, may have missed changes).
	timer := time.NewTimer(g.cfg.settle)
	defer timer.Stop()
	first := time.Now() // the first change not written yet
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return
			}
			for _, ev := range wr.Events {
				l.change(ev)
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			wait := min(g.cfg.settle, first.Add(10*g.cfg.settle).Sub(now))
			timer.Reset(max(wait, 0))
		case <-timer.C:
			if l.write(ctx) {
				first = time.Time{}
			} else {
				timer.Reset(100 * time.Millisecond)
			}
		case <-ctx.Done():
			return
		}
	}
}

// change applies one membership event.
func (l *leader) change(ev *clientv3.Event) {
	name := string(ev.Kv.Key[len(l.m.g.membersDir()):])
	if ev.Type == clientv3.EventTypeDelete {
		delete(l.members, name)
		return
	}
	if mi, ok := l.m.g.parseMember(ev.Kv.Key, ev.Kv.Value); ok {
		l.members[name] = mi
	} else {
		delete(l.members, name)
	}
}

// write stores the plan for the current members if it differs from the
// stored assignment; false when it must be tried again.
func (l *leader) write(ctx context.Context) bool {
	g := l.m.g
	cands := make([]candidate, 0, len(l.members))
	for _, mi := range l.members {
		cands = append(cands, candidate{name: mi.Name, weight: mi.Weight, draining: mi.Draining})
	}
	next := plan(l.owners, cands)
	if slices.Equal(next, l.owners) {
		return true
	}
	v, err := g.encode(next, l.term.Fence().Revision)
	if err != nil {
		return false
	}
	key := g.assignKey()
	resp, err := g.etcd.Txn(ctx).
		If(l.cond, clientv3.Compare(clientv3.ModRevision(key), "=", l.modRev)).
		Then(clientv3.OpPut(key, string(v))).Commit()
	switch {
	case err != nil:
		return false
	case !resp.Succeeded:
		// The term ended (its lease ends soon too) or another writer
		// came first: read what is stored and plan from it.
		_ = l.read(ctx)
		return false
	}
	l.count(next)
	l.owners, l.modRev = next, resp.Header.Revision
	return true
}

// count adds the moves from the stored assignment to next to the moves
// metric, by cause.
func (l *leader) count(next []string) {
	g := l.m.g
	moves := map[string]int{}
	for i, o := range next {
		prev := l.owners[i]
		if o == "" || o == prev {
			continue
		}
		mi, ok := l.members[prev]
		switch {
		case prev == "":
			moves["initial"]++
		case !ok:
			moves["departed"]++
		case mi.Draining:
			moves["drain"]++
		default:
			moves["rebalance"]++
		}
	}
	for cause, n := range moves {
		g.met.moves.WithLabelValues(g.name, cause).Add(float64(n))
	}
	g.cfg.log.Info("shard assignment written", slog.String("group", g.name), slog.Int("members", len(l.members)), slog.Any("moves", moves))
}
