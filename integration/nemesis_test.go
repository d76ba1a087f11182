//go:build unix

package integration

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
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
	slowHeal      = 2 * time.Second  // a heal that takes longer is logged
	compactTries  = 5                // locks compacted-watch tries to take
	revokeTries   = 5                // holders revoke tries to find
	firstRestart1 = 3 * time.Second  // one member: before the first restart
	restartGap1   = 10 * time.Second // one member: between restarts
)

// nemesis injects the faults of one phase and counts them per line.
type nemesis struct {
	t       *testing.T
	phase   int // index of the phase
	members int
	procs   bool // members are processes: freeze and kill them
	rec     *recorder
	admin   *clientv3.Client // not behind a proxy
	cluster *etcdtest.Cluster
	workers []*workerRT
	lines   []line

	mu      sync.Mutex
	counts  []map[string]int
	windows []window // faults that took effect, for the successor check
}

// window is one fault that took effect, from just before its injection to
// just after its heal (Unix nanoseconds); worker is the worker process it
// froze, or -1.
type window struct {
	kind     string
	worker   int
	from, to int64
	// taken names, for a fault that took records away (faults.Taker),
	// the records it took by their creation revisions; nil for the
	// other faults.
	taken []int64
}

func (n *nemesis) allLines() []int {
	ls := make([]int, len(n.lines))
	for i := range ls {
		ls[i] = i
	}
	return ls
}

// apply injects f, holds it, and heals it. It counts f for lines when
// the injection took effect, in whole or in part (faults.ErrPartial); an
// injection that found nothing to disrupt, or failed, is not counted. A
// fault that took effect, and one whose outcome is unknown
// (faults.ErrOutcomeUnknown: its delete or revoke may have applied), is
// kept as a window for the successor check. A heal that fails fails the
// test: the rest of the run would not be what it claims.
func (n *nemesis) apply(ctx context.Context, f faults.Fault, hold time.Duration, lines []int) bool {
	return n.applyTo(ctx, f, hold, lines, -1)
}

// applyTo is apply for a fault that freezes worker (-1: none).
func (n *nemesis) applyTo(ctx context.Context, f faults.Fault, hold time.Duration, lines []int, worker int) bool {
	from := time.Now().UnixNano()
	if os.Getenv(envSafetyLog) != "" {
		n.t.Logf("nemesis: %s at %s, held %v", f.Kind(), time.Unix(0, from).UTC().Format("15:04:05.000000"), hold)
	}
	err := f.Inject(ctx)
	took := err == nil || errors.Is(err, faults.ErrPartial)
	if err != nil && !errors.Is(err, faults.ErrNoTarget) && ctx.Err() == nil {
		verdict := "not counted"
		if took {
			verdict = "took effect: counted"
		}
		n.t.Logf("nemesis: inject %s: %v (%s)", f.Kind(), err, verdict)
	}
	if !took && !errors.Is(err, faults.ErrOutcomeUnknown) {
		return false
	}
	if took {
		n.mu.Lock()
		for _, l := range lines {
			n.counts[l][f.Kind()]++
		}
		n.mu.Unlock()
		sleep(ctx, hold)
	}
	n.heal(ctx, f)
	w := window{kind: f.Kind(), worker: worker, from: from, to: time.Now().UnixNano()}
	if tf, ok := f.(faults.Taker); ok {
		w.taken = tf.Taken()
		if w.taken == nil {
			w.taken = []int64{}
		}
	}
	n.mu.Lock()
	n.windows = append(n.windows, w)
	n.mu.Unlock()
	return took
}

// heal heals f, failing the test if it cannot.
func (n *nemesis) heal(ctx context.Context, f faults.Fault) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := f.Heal(hctx); err != nil {
		n.t.Errorf("nemesis: heal %s: %v", f.Kind(), err)
	}
	if d := time.Since(start); d > slowHeal {
		n.t.Logf("nemesis: heal %s took %v", f.Kind(), d.Round(time.Millisecond))
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

// pauses stops worker processes, one at a time, until ctx ends.
func (n *nemesis) pauses(ctx context.Context) {
	for ctx.Err() == nil {
		w := n.busiest(n.pick(true))
		n.applyTo(ctx, faults.Pause(w.proc), pauseHold, n.allLines(), w.id)
		sleep(ctx, time.Duration(1500+rand.IntN(1000))*time.Millisecond)
	}
}

// linkFaults disrupts workers' links to etcd, one fault at a time, until
// ctx ends.
func (n *nemesis) linkFaults(ctx context.Context) {
	kinds := []string{faults.KindPartition, faults.KindCompactedWatch, faults.KindLostReplies, faults.KindDelay}
	if n.members > 1 {
		kinds = append(kinds, faults.KindMemberSwitch)
	}
	// Each phase starts elsewhere in the rotation, so that short phases
	// still cover every kind between them.
	for i := 2 * n.phase; ctx.Err() == nil; i++ {
		w := n.busiest(n.workers)
		var (
			f    faults.Fault
			hold time.Duration
		)
		switch kinds[i%len(kinds)] {
		case faults.KindPartition:
			f, hold = faults.Partition(w.proxies...), partitionHold
		case faults.KindCompactedWatch:
			// The lock picked may have changed hands by the time
			// the fault looks: try a few.
			for range compactTries {
				if n.apply(ctx, faults.CompactedWatch(n.admin, n.heldPrefix(w), w.proxies...), partitionHold, n.allLines()) {
					break
				}
			}
		case faults.KindLostReplies:
			f, hold = faults.LostReplies(w.proxies...), lostHold
		case faults.KindDelay:
			f, hold = faults.SlowLink(linkDelay, w.proxies...), delayHold
		case faults.KindMemberSwitch:
			keep := rand.IntN(len(w.proxies))
			cut := append(append([]*faults.Proxy(nil), w.proxies[:keep]...), w.proxies[keep+1:]...)
			f, hold = faults.SwitchMember(w.proxies[keep], cut...), partitionHold
		}
		if f != nil {
			if os.Getenv(envSafetyLog) != "" {
				n.t.Logf("nemesis: next link fault on worker %d", w.id)
			}
			n.apply(ctx, f, hold, n.allLines())
		}
		sleep(ctx, time.Duration(1000+rand.IntN(500))*time.Millisecond)
	}
}

// heldPrefix returns the lock prefix of a shard w holds, or of any shard
// when it holds none.
func (n *nemesis) heldPrefix(w *workerRT) string {
	ks := n.rec.heldBy(w.id)
	if len(ks) == 0 {
		l := rand.IntN(len(n.lines))
		ks = []shardKey{{l, rand.IntN(n.lines[l].spec.Shards)}}
	}
	k := ks[rand.IntN(len(ks))]
	return n.lockPrefix(k.line, k.shard)
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
			n.deleteKeys(ctx)
		case faults.KindSlowWriter:
			n.apply(ctx, n.busiest(n.pick(false)).slow, slowHold, n.allLines())
		}
		sleep(ctx, time.Duration(800+rand.IntN(600))*time.Millisecond)
	}
}

func (n *nemesis) lockPrefix(l, shard int) string {
	return faults.LockPrefix(lease.DefaultPrefix, n.lines[l].spec.lockName(shard))
}

// deletesPerLine is how many holders' records each round of delete-key
// deletes per line.
const deletesPerLine = 3

// deleteKeys deletes the records of a few holders of every line.
func (n *nemesis) deleteKeys(ctx context.Context) {
	held := n.holders(ctx)
	for l := range n.lines {
		var ks []shardKey
		for k := range held {
			if k.line == l {
				ks = append(ks, k)
			}
		}
		rand.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		for _, k := range ks[:min(len(ks), deletesPerLine)] {
			n.apply(ctx, faults.DeleteHolder(n.admin, n.lockPrefix(k.line, k.shard)), 0, []int{l})
		}
	}
}

// holders returns the session lease of the holder of every shard that
// has one, read in one request.
func (n *nemesis) holders(ctx context.Context) map[shardKey]clientv3.LeaseID {
	byLock := map[string]shardKey{}
	for l, ln := range n.lines {
		for shard := range ln.spec.Shards {
			byLock[ln.spec.lockName(shard)] = shardKey{l, shard}
		}
	}
	resp, err := n.admin.Get(ctx, lease.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() == nil {
			n.t.Logf("nemesis: find holders: %v", err)
		}
		return nil
	}
	held := map[shardKey]clientv3.LeaseID{}
	lowest := map[shardKey]int64{}
	for _, kv := range resp.Kvs {
		name, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), lease.DefaultPrefix), "/")
		k, known := byLock[name]
		if !ok || !known {
			continue
		}
		if r, seen := lowest[k]; !seen || kv.CreateRevision < r {
			lowest[k] = kv.CreateRevision
			held[k] = clientv3.LeaseID(kv.Lease)
		}
	}
	return held
}

// revoke revokes the lease of a random shard's holder. That lease carries
// the records of every lock its worker holds: the revocation counts for
// each line where it held one.
func (n *nemesis) revoke(ctx context.Context) {
	// A holder may be gone by the time the fault looks, or etcd may be
	// restarting: try a few times.
	for range revokeTries {
		if n.revokeOnce(ctx) || !sleep(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// revokeOnce revokes the lease of a random shard's holder, and reports
// whether it did.
func (n *nemesis) revokeOnce(ctx context.Context) bool {
	held := n.holders(ctx)
	if len(held) == 0 {
		return false
	}
	var ks []shardKey
	for k := range held {
		ks = append(ks, k)
	}
	target := ks[rand.IntN(len(ks))]
	lines := map[int]bool{}
	for k, id := range held {
		if id == held[target] {
			lines[k.line] = true
		}
	}
	var affected []int
	for l := range n.lines {
		if lines[l] {
			affected = append(affected, l)
		}
	}
	return n.apply(ctx, faults.RevokeHolder(n.admin, n.lockPrefix(target.line, target.shard)), 0, affected)
}

// clusterFaults restarts members from their data dirs and, with three
// members, crashes followers and kills leaders, until ctx ends. With one
// member a restart stops the whole cluster, and every lease with it: it
// comes once every restartGap1, after a first stretch of ordinary work.
func (n *nemesis) clusterFaults(ctx context.Context) {
	members := n.cluster.Members()
	if n.procs {
		n.signalFaults(ctx, members)
		return
	}
	if len(members) == 1 {
		sleep(ctx, firstRestart1)
		for ctx.Err() == nil {
			n.apply(ctx, faults.RestartMember(members[0]), 0, n.allLines())
			sleep(ctx, restartGap1+time.Duration(rand.IntN(2000))*time.Millisecond)
		}
		return
	}
	for i := 0; ctx.Err() == nil; i++ {
		var (
			f    faults.Fault
			hold = memberHold
		)
		switch i % 3 {
		case 0:
			var followers []faults.Member
			for _, m := range members {
				if !m.IsLeader() {
					followers = append(followers, m)
				}
			}
			f = faults.CrashMember(followers[rand.IntN(len(followers))])
		case 1:
			f = faults.KillLeader(n.cluster.FaultMembers()...)
		default:
			f, hold = faults.RestartMember(members[rand.IntN(len(members))]), 0
		}
		n.apply(ctx, f, hold, n.allLines())
		// Let the restarted member catch up before the next one goes.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = n.cluster.WaitLeader(wctx)
		cancel()
		sleep(ctx, time.Duration(1500+rand.IntN(1000))*time.Millisecond)
	}
}

// signalFaults freezes (SIGSTOP, continued after pauseHold: past the
// lease TTL) and kills (SIGKILL, restarted after memberHold) member
// processes, a follower or the leader in turn, until ctx ends.
func (n *nemesis) signalFaults(ctx context.Context, members []*etcdtest.Member) {
	procs := make([]faults.ProcessMember, len(members))
	for i, m := range members {
		procs[i] = m
	}
	for i := 0; ctx.Err() == nil; i++ {
		var followers []faults.ProcessMember
		for _, m := range procs {
			if !m.IsLeader() {
				followers = append(followers, m)
			}
		}
		follower := followers[rand.IntN(len(followers))]
		var (
			f    faults.Fault
			hold = memberHold
		)
		switch i % 4 {
		case 0:
			f, hold = faults.SigstopLeader(procs...), pauseHold
		case 1:
			f = faults.SigkillLeader(procs...)
		case 2:
			f, hold = faults.SigstopMember(follower), pauseHold
		default:
			f = faults.SigkillMember(follower)
		}
		n.apply(ctx, f, hold, n.allLines())
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = n.cluster.WaitLeader(wctx)
		cancel()
		sleep(ctx, time.Duration(1000+rand.IntN(1000))*time.Millisecond)
	}
}
