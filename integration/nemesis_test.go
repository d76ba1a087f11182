//go:build unix

package integration

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fault timing. Every fault that takes a lease away is held past the
// point where etcd expires it (TTL plus about 0.5 s) and another worker
// can acquire, read and write.
const (
	pauseHold     = 2600 * time.Millisecond
	partitionHold = 2400 * time.Millisecond
	lostHold      = 2000 * time.Millisecond
	delayHold     = 2000 * time.Millisecond
	linkDelay     = 400 * time.Millisecond
	slowHold      = 1500 * time.Millisecond
	memberHold    = 1500 * time.Millisecond
)

// nemesis injects the faults of one phase and counts them per line.
type nemesis struct {
	t       *testing.T
	phase   int // index of the phase
	rec     *recorder
	admin   *clientv3.Client // not behind a proxy
	cluster *etcdtest.Cluster
	workers []*workerRT
	lines   []line

	mu     sync.Mutex
	counts []map[string]int
}

func (n *nemesis) allLines() []int {
	ls := make([]int, len(n.lines))
	for i := range ls {
		ls[i] = i
	}
	return ls
}

// apply injects f, holds it, and heals it. It counts f for lines when
// the injection took effect; an injection that found nothing to disrupt,
// or failed, is not counted. A heal that fails fails the test: the rest of
// the run would not be what it claims.
func (n *nemesis) apply(ctx context.Context, f faults.Fault, hold time.Duration, lines []int) {
	if err := f.Inject(ctx); err != nil {
		if !errors.Is(err, faults.ErrNoTarget) && ctx.Err() == nil {
			n.t.Logf("nemesis: inject %s: %v (not counted)", f.Kind(), err)
		}
		return
	}
	n.mu.Lock()
	for _, l := range lines {
		n.counts[l][f.Kind()]++
	}
	n.mu.Unlock()
	sleep(ctx, hold)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := f.Heal(hctx); err != nil {
		n.t.Errorf("nemesis: heal %s: %v", f.Kind(), err)
	}
}

// busiest returns the worker among ws that holds the most locks (ties
// broken at random), so that faults hit holders in their critical
// sections rather than idle waiters.
func (n *nemesis) busiest(ws []*workerRT) *workerRT {
	var best []*workerRT
	most := -1
	for _, w := range ws {
		switch h := n.rec.holding(w.id); {
		case h > most:
			best, most = []*workerRT{w}, h
		case h == most:
			best = append(best, w)
		}
	}
	return best[rand.IntN(len(best))]
}

func (n *nemesis) pick(proc bool) []*workerRT {
	var ws []*workerRT
	for _, w := range n.workers {
		if (w.proc != nil) == proc {
			ws = append(ws, w)
		}
	}
	return ws
}

// processFaults stops worker processes and disrupts workers' links to
// etcd, one fault at a time, until ctx ends.
func (n *nemesis) processFaults(ctx context.Context) {
	kinds := []string{faults.KindPause, faults.KindPartition, faults.KindLostReplies, faults.KindPause, faults.KindDelay}
	// Each phase starts elsewhere in the rotation, so that short phases
	// still cover every kind between them.
	for i := 3 * n.phase; ctx.Err() == nil; i++ {
		var (
			f    faults.Fault
			hold time.Duration
		)
		switch kinds[i%len(kinds)] {
		case faults.KindPause:
			f, hold = faults.Pause(n.busiest(n.pick(true)).proc), pauseHold
		case faults.KindPartition:
			f, hold = faults.Partition(n.busiest(n.workers).proxies...), partitionHold
		case faults.KindLostReplies:
			f, hold = faults.LostReplies(n.busiest(n.workers).proxies...), lostHold
		case faults.KindDelay:
			f, hold = faults.SlowLink(linkDelay, n.busiest(n.workers).proxies...), delayHold
		}
		n.apply(ctx, f, hold, n.allLines())
		sleep(ctx, time.Duration(300+rand.IntN(400))*time.Millisecond)
	}
}

// leaseFaults takes leases away behind their holders' backs and slows
// writers, until ctx ends.
func (n *nemesis) leaseFaults(ctx context.Context) {
	kinds := []string{faults.KindRevoke, faults.KindSlowWriter, faults.KindDeleteKey}
	for i := n.phase; ctx.Err() == nil; i++ {
		switch kinds[i%len(kinds)] {
		case faults.KindRevoke:
			n.revoke(ctx)
		case faults.KindDeleteKey:
			for l := range n.lines {
				n.apply(ctx, faults.DeleteHolder(n.admin, n.lockPrefix(l)), 0, []int{l})
			}
		case faults.KindSlowWriter:
			n.apply(ctx, n.busiest(n.pick(false)).slow, slowHold, n.allLines())
		}
		sleep(ctx, time.Duration(1000+rand.IntN(600))*time.Millisecond)
	}
}

func (n *nemesis) lockPrefix(l int) string {
	return faults.LockPrefix(lease.DefaultPrefix, n.lines[l].spec.Lock)
}

// revoke revokes the lease of a random line's holder. That lease carries
// the records of every lock its worker holds: the revocation counts for
// each line whose holder it was.
func (n *nemesis) revoke(ctx context.Context) {
	leases := map[int]clientv3.LeaseID{}
	var held []int
	for l := range n.lines {
		if _, _, id, err := faults.Holder(ctx, n.admin, n.lockPrefix(l)); err == nil {
			leases[l] = id
			held = append(held, l)
		}
	}
	if len(held) == 0 {
		return
	}
	target := held[rand.IntN(len(held))]
	var affected []int
	for _, l := range held {
		if leases[l] == leases[target] {
			affected = append(affected, l)
		}
	}
	n.apply(ctx, faults.RevokeHolder(n.admin, n.lockPrefix(target)), 0, affected)
}

// clusterFaults crashes followers and kills leaders, until ctx ends.
func (n *nemesis) clusterFaults(ctx context.Context) {
	members := n.cluster.FaultMembers()
	for i := 0; ctx.Err() == nil; i++ {
		var f faults.Fault
		if i%2 == 0 {
			var followers []faults.Member
			for _, m := range n.cluster.Members() {
				if !m.IsLeader() {
					followers = append(followers, m)
				}
			}
			f = faults.CrashMember(followers[rand.IntN(len(followers))])
		} else {
			f = faults.KillLeader(members...)
		}
		n.apply(ctx, f, memberHold, n.allLines())
		// Let the restarted member catch up before the next one goes.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = n.cluster.WaitLeader(wctx)
		cancel()
		sleep(ctx, time.Duration(1500+rand.IntN(1000))*time.Millisecond)
	}
}
