//go:build unix

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/internal/etcdproc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Environment variables.
const (
	envSoak    = "FENCEKIT_SOAK"       // total run time, e.g. 10m
	envPG      = "FENCEKIT_PG_DSN"     // e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable
	envMySQL   = "FENCEKIT_MYSQL_DSN"  // e.g. root@tcp(127.0.0.1:3306)/test
	envRequire = "FENCEKIT_REQUIRE_DB" // 1: fail when a DSN is missing
)

// defaultRun is the time the phases of TestSafety run for, in total,
// without FENCEKIT_SOAK. Setup and teardown add a few seconds. Without
// FENCEKIT_SOAK, a phase that has not reached its share of targetOps by
// then runs on, up to its share of maxRun (maxRunRace under the race
// detector, which slows the workers down).
const (
	defaultRun = 26 * time.Second
	maxRun     = 45 * time.Second
	maxRunRace = 40 * time.Second
	targetOps  = 10000 // guarded read-modify-write cycles per run
)

// Shards (independent locks, each with its own resource) per line: the
// guarded lines carry the volume, sharing guardedShards between the
// workloads (64 each for the register and SQLite; 32 each when the
// PostgreSQL and MySQL workloads run too); the controls need only show
// that the faults bite. The race detector makes every operation several
// times dearer in CPU: with as many shards, the workers would starve their
// own lease renewals.
const (
	guardedShards     = 128
	controlShards     = 8
	guardedShardsRace = 48
	controlShardsRace = 6
)

// porcupineWait bounds the linearizability check of one shard's history.
const porcupineWait = 10 * time.Second

// Workers per phase: in-process workers can be slowed (slow-writer),
// worker processes can be paused; all can be partitioned.
const (
	inProcessWorkers = 2
	processWorkers   = 2
)

// Minimum number of fault kinds every guarded line must have seen.
const minFaultKinds = 8

// phase is one cluster configuration of the run.
type phase struct {
	name    string
	members int
	share   float64 // of the run time
	// procs runs the members as etcd server processes (the binary
	// FENCEKIT_ETCD_VERSION or FENCEKIT_ETCD_BIN names), which the
	// cluster nemesis freezes and kills with signals.
	procs bool
}

var phases = []phase{
	{name: "etcd1", members: 1, share: 0.4},
	{name: "etcd3", members: 3, share: 0.6},
}

// totals adds up one line (workload and mode) over the phases.
type totals struct {
	workload, mode          string
	shards                  int
	ops, accepted, rejected int
	failed, late            int
	violations, lost        int
	faults                  map[string]int
	examples                []string
	ran                     time.Duration // phases' run time, summed
	// Release and Reenter: unknown outcomes, calls made before the
	// retry, retries that settled
	unknown, between, settled int
	lostRace                  map[string]int
	// porcupine: shards checked, found not linearizable, timed out
	linChecked, linBad, linUnknown int
	linOps                         int
	linTook                        time.Duration
	succ                           successorStats
}

// verdict is porcupine's verdict over the line's shards.
func (s *totals) verdict() string {
	switch {
	case s.linBad > 0:
		return string(check.NotLinearizable)
	case s.linUnknown > 0:
		return string(check.TimedOut)
	case s.linChecked == 0:
		return "none"
	}
	return string(check.Linearizable)
}

func (s *totals) opsPerSec() float64 {
	if s.ran <= 0 {
		return 0
	}
	return float64(s.ops) / s.ran.Seconds()
}

// counts prints m as k:n,k:n in the order of the keys, or "none".
func counts(m map[string]int) string {
	kinds := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

func (s *totals) line() string {
	f := counts(s.faults)
	return fmt.Sprintf("SAFETY workload=%s mode=%s locks=%d ops=%d ops/s=%.0f accepted=%d rejected=%d faults=%s violations=%d lost=%d porcupine=%s handovers=%d early=%d etcd_early=%d",
		s.workload, s.mode, s.shards, s.ops, s.opsPerSec(), s.accepted, s.rejected, f, s.violations, s.lost, s.verdict(), s.succ.checked-s.succ.excused, s.succ.early, s.succ.etcdEarly)
}

// TestSafety is the Jepsen-style safety suite: see the package doc.
func TestSafety(t *testing.T) {
	run, limit := defaultRun, maxRun
	if raceDetector {
		limit = maxRunRace
	}
	runSafety(t, phases, run, limit, targetOps, allKinds)
}

// runSafety runs the phases for run (and on until the guarded lines have
// started want cycles, up to limit; FENCEKIT_SOAK sets both), checks
// every line, and fails unless every kind of fault in kinds took effect.
func runSafety(t *testing.T, phases []phase, run, limit time.Duration, want int, kinds []string) {
	if v := os.Getenv(envSoak); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 10m", envSoak, v)
		}
		run, limit = d, d
	}
	workloads := []workload{registerWorkload(), sqlWorkload("sqlite", "sqlite", "")}
	if dsn := dsnFor(t, envPG); dsn != "" {
		workloads = append(workloads, sqlWorkload("postgres", "pgx", dsn))
	}
	if dsn := dsnFor(t, envMySQL); dsn != "" {
		workloads = append(workloads, sqlWorkload("mysql", "mysql", dsn))
	}

	start := time.Now()
	all := map[string]*totals{}
	var order []string
	for i, ph := range phases {
		b := budget{
			min:  time.Duration(float64(run) * ph.share),
			max:  time.Duration(float64(limit) * ph.share),
			want: int(float64(want) * ph.share),
		}
		t.Run(ph.name, func(t *testing.T) {
			runPhase(t, i, ph, b, workloads, func(spec lineSpec) *totals {
				key := spec.Workload + "/" + spec.mode()
				if all[key] == nil {
					all[key] = &totals{workload: spec.Workload, mode: spec.mode(), shards: spec.Shards, faults: map[string]int{}}
					order = append(order, key)
				}
				return all[key]
			})
		})
		if t.Failed() {
			break
		}
	}
	took := time.Since(start).Round(100 * time.Millisecond)

	var guardedOps, unknown, between, settled int
	lostRace := map[string]int{}
	var ran time.Duration
	seen := map[string]bool{}
	for _, key := range order {
		s := all[key]
		fmt.Println(s.line())
		t.Logf("%s/%s: porcupine checked %d ops in %d shards in %v; hand-overs: %d, %d of them excused by a fault", s.workload, s.mode, s.linOps, s.linChecked, s.linTook.Round(time.Millisecond), s.succ.checked, s.succ.excused)
		for k := range s.faults {
			seen[k] = true
		}
		if s.succ.etcdEarly != 0 {
			t.Logf("%s/%s: %d of %d hand-overs admitted a successor early because etcd revoked the holder's session before its TTL ran out, after a frozen member continued (an etcd defect; docs/concepts.md, What it does not guarantee): %v",
				s.workload, s.mode, s.succ.etcdEarly, s.succ.checked, s.succ.etcdExamples)
		}
		if s.succ.early != 0 {
			t.Errorf("%s/%s: %d of %d hand-overs admitted a successor before the holder learned its lease had ended; first: %v",
				s.workload, s.mode, s.succ.early, s.succ.checked, s.succ.examples)
		}
		unknown += s.unknown
		between += s.between
		settled += s.settled
		for k, c := range s.lostRace {
			lostRace[k] += c
		}
		switch s.mode {
		case "guarded":
			guardedOps += s.ops
			ran = s.ran
			if s.violations != 0 || s.lost != 0 {
				t.Errorf("%s/guarded: %d violations, %d lost; first: %v", s.workload, s.violations, s.lost, s.examples)
			}
			if s.linBad != 0 {
				t.Errorf("%s/guarded: porcupine found %d shard histories not linearizable", s.workload, s.linBad)
			}
			if len(s.faults) < minFaultKinds {
				t.Errorf("%s/guarded: %d fault kinds injected, want at least %d", s.workload, len(s.faults), minFaultKinds)
			}
			if s.accepted == 0 {
				t.Errorf("%s/guarded: no write was accepted: the workload did not run", s.workload)
			}
		default:
			if s.violations == 0 {
				t.Errorf("%s/unguarded: no violation without the guard: the faults did not bite, so the guarded result proves nothing", s.workload)
			} else {
				t.Logf("%s/unguarded: the negative control caught, e.g.: %v", s.workload, s.examples)
			}
		}
	}
	fmt.Printf("SAFETY total guarded ops=%d ops/s=%.0f fault-kinds=%d run=%v\n", guardedOps, float64(guardedOps)/ran.Seconds(), len(seen), took)
	fmt.Printf("SAFETY lease release-reenter unknown-outcomes=%d calls-between=%d retries-settled=%d released-but-lost=%s\n", unknown, between, settled, counts(lostRace))
	for _, k := range kinds {
		if !seen[k] {
			t.Errorf("fault %s never took effect in this run", k)
		}
	}
}

// allKinds lists the faults of the rotation.
var allKinds = []string{
	faults.KindPause, faults.KindPartition, faults.KindLostReplies, faults.KindDelay,
	faults.KindRevoke, faults.KindDeleteKey, faults.KindSlowWriter,
	faults.KindMemberCrash, faults.KindLeaderKill, faults.KindMemberRestart,
	faults.KindMemberSwitch, faults.KindCompactedWatch,
}

// budget is how long a phase runs: at least min, then until the guarded
// lines have started want cycles, but no longer than max.
type budget struct {
	min, max time.Duration
	want     int
}

// dsnFor returns the DSN in env, or "" (skipping that database) when it
// is not set, unless FENCEKIT_REQUIRE_DB=1.
func dsnFor(t *testing.T, env string) string {
	dsn := os.Getenv(env)
	if dsn == "" {
		if os.Getenv(envRequire) == "1" {
			t.Fatalf("%s is not set and %s=1", env, envRequire)
		}
		t.Logf("%s not set: that SQL workload is skipped", env)
	}
	return dsn
}

// workerRT is one worker of a phase.
type workerRT struct {
	id      int
	proxies []*faults.Proxy
	slow    *faults.SlowWriter // in-process workers
	proc    *faults.Worker     // worker processes
	stderr  syncBuffer
	events  *eventWriter
}

func runPhase(t *testing.T, idx int, ph phase, b budget, workloads []workload, totalsFor func(lineSpec) *totals) {
	ctx, cancel := context.WithTimeout(context.Background(), b.max+2*time.Minute)
	defer cancel()
	setupStart := time.Now()
	var err error
	defer func() { t.Logf("phase took %v in all", time.Since(setupStart).Round(time.Millisecond)) }()
	cfg := etcdtest.Config{Dir: t.TempDir(), Members: ph.members, NoFsync: true}
	if dir := os.Getenv(envSafetyLog); dir != "" {
		cfg.Dir = filepath.Join(dir, "etcd")
	}
	if ph.procs {
		if cfg.Binary, err = etcdproc.Built(""); err != nil {
			t.Fatal(err) // says how to build it: never under this phase's deadline
		}
	}
	cluster, err := etcdtest.StartCluster(ctx, cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	defer closeCluster(cluster)
	admin, err := cluster.NewClient()
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	defer admin.Close()

	// Resources: two lines (guarded, unguarded) per workload.
	env := &phaseEnv{t: t, dir: t.TempDir(), run: fmt.Sprintf("fks%x", rand.Uint32()), etcd: admin, workloads: len(workloads)}
	var lines []line
	for _, w := range workloads {
		ls, cleanup := w.setup(ctx, env)
		defer cleanup()
		lines = append(lines, ls...)
	}
	specs := make([]lineSpec, len(lines))
	for i, l := range lines {
		specs[i] = l.spec
	}
	rec := newRecorder(specs)

	// Workers, each behind its own proxies to every member.
	var workers []*workerRT
	defer func() {
		for _, w := range workers {
			for _, p := range w.proxies {
				p.Close()
			}
		}
	}()
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var inProc sync.WaitGroup
	for id := range inProcessWorkers + processWorkers {
		w := &workerRT{id: id}
		workers = append(workers, w)
		var eps []string
		for _, m := range cluster.Members() {
			p, err := cluster.NewProxy(m)
			if err != nil {
				t.Fatalf("proxy: %v", err)
			}
			w.proxies = append(w.proxies, p)
			eps = append(eps, p.URL())
		}
		cfg := workerConfig{ID: id, Endpoints: eps, Lines: specs, ElemBase: int64(idx+1)*1e9 + int64(id)*1e7}
		if id < inProcessWorkers {
			w.slow = faults.NewSlowWriter(2500 * time.Millisecond)
			inProc.Go(func() {
				if err := runWorker(wctx, cfg, w.slow, rec.record); err != nil {
					t.Errorf("worker %d: %v", id, err)
				}
			})
			continue
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.events = &eventWriter{rec: rec}
		w.proc, err = faults.StartWorker(workerName, []string{envWorkerConf + "=" + string(b)}, w.events, &w.stderr)
		if err != nil {
			t.Fatalf("start worker process: %v", err)
		}
	}
	var stopOnce sync.Once
	stopProcs := func() {
		stopOnce.Do(func() {
			for _, w := range workers {
				if w.proc == nil {
					continue
				}
				sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				if err := w.proc.Stop(sctx); err != nil {
					t.Errorf("worker process %d: %v; stderr:\n%s", w.id, err, w.stderr.String())
				} else if s := w.stderr.String(); s != "" {
					t.Logf("worker process %d stderr:\n%s", w.id, s)
				}
				cancel()
				if bad := w.events.garbage(); len(bad) > 0 {
					t.Errorf("worker process %d wrote lines that are not events: %q", w.id, bad)
				}
			}
		})
	}
	defer func() {
		if !t.Failed() {
			return
		}
		stopWorkers()
		stopProcs()
	}()

	// Nemeses, for the phase's budget.
	n := &nemesis{t: t, phase: idx, members: ph.members, procs: ph.procs, rec: rec, admin: admin, cluster: cluster, workers: workers, lines: lines, counts: make([]map[string]int, len(lines))}
	for i := range n.counts {
		n.counts[i] = map[string]int{}
	}
	t.Logf("setup took %v", time.Since(setupStart).Round(time.Millisecond))
	nctx, stopNemeses := context.WithCancel(ctx)
	defer stopNemeses()
	var nem sync.WaitGroup
	nem.Go(func() { n.pauses(nctx) })
	nem.Go(func() { n.linkFaults(nctx) })
	nem.Go(func() { n.leaseFaults(nctx) })
	nem.Go(func() { n.clusterFaults(nctx) })
	began := time.Now()
	sleep(ctx, b.min)
	t.Logf("after %v: %d guarded cycles (want %d)", time.Since(began).Round(time.Millisecond), rec.guardedOps(), b.want)
	for time.Since(began) < b.max && rec.guardedOps() < b.want && ctx.Err() == nil {
		sleep(ctx, 500*time.Millisecond)
	}
	ended := time.Now()
	stopNemeses()
	nem.Wait() // every fault healed
	healed := time.Now()
	stopWorkers()
	stopProcs()
	inProc.Wait()
	ran := time.Since(began)
	t.Logf("phase ran %v (%d guarded cycles); healing took %v, stopping workers %v", ended.Sub(began).Round(time.Millisecond),
		rec.guardedOps(), healed.Sub(ended).Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
	for _, bad := range rec.badEvents() {
		t.Errorf("a worker got an error outside lease's documented set: %s", bad)
	}

	// Check every shard of every line.
	for i, l := range lines {
		tot := totalsFor(l.spec)
		tot.ran += ran
		var sum lineStats
		var applied, final, backwards, interleaved, lost int
		for shard := range l.spec.Shards {
			history, fin, err := l.inspect(ctx, shard)
			if err != nil {
				t.Errorf("%s/%s: inspect shard %d: %v", l.spec.Workload, l.spec.mode(), shard, err)
				continue
			}
			st := rec.stats[i][shard]
			tot.succ.add(checkSuccessors(st.holds, n.windows))
			v, err := check.Check(history, st.acked, fin)
			if err != nil {
				t.Errorf("%s/%s shard %d: %v", l.spec.Workload, l.spec.mode(), shard, err)
				continue
			}
			sum.add(st)
			applied += len(history)
			final += len(fin)
			backwards += v.Backwards
			interleaved += v.Interleaved
			lost += v.Lost
			tot.violations += v.Violations
			tot.lost += v.Lost
			for _, p := range v.Problems[:min(len(v.Problems), 5)] {
				if len(tot.examples) < 10 {
					tot.examples = append(tot.examples, fmt.Sprintf("%s shard %d: %s", ph.name, shard, p))
				}
			}
			// The control needs one history porcupine rejects.
			if !l.spec.Guarded && tot.linBad > 0 {
				continue
			}
			ops := rec.history(i, shard)
			lin := check.CheckLinearizable(ops, porcupineWait)
			tot.linChecked++
			tot.linOps += lin.Ops
			tot.linTook += lin.Took
			switch lin.Verdict {
			case check.NotLinearizable:
				tot.linBad++
				if l.spec.Guarded {
					visualize(t, lin, ops, fmt.Sprintf("%s-%s-%s-%d", l.spec.Workload, l.spec.mode(), ph.name, shard))
				}
			case check.TimedOut:
				tot.linUnknown++
			}
		}
		tot.ops += sum.ops
		tot.accepted += len(sum.acked)
		tot.rejected += sum.rejected
		tot.failed += sum.failed
		tot.late += sum.late
		tot.unknown += sum.unknown
		tot.between += sum.between
		tot.settled += sum.resolved
		for k, c := range sum.lostRace {
			if tot.lostRace == nil {
				tot.lostRace = map[string]int{}
			}
			tot.lostRace[k] += c
		}
		for k, c := range n.counts[i] {
			tot.faults[k] += c
		}
		t.Logf("%s/%s: ops=%d acked=%d rejected=%d failed=%d late=%d applied=%d final=%d backwards=%d interleaved=%d lost=%d unknown-outcomes=%d calls-between=%d settled=%d faults=%v",
			l.spec.Workload, l.spec.mode(), sum.ops, len(sum.acked), sum.rejected, sum.failed, sum.late,
			applied, final, backwards, interleaved, lost, sum.unknown, sum.between, sum.resolved, n.counts[i])
	}
}

// visualize writes porcupine's view of a history that is not
// linearizable to a file that outlives the test, and names it.
func visualize(t *testing.T, lin *check.Linearization, ops []check.Op, name string) {
	dir := os.Getenv("FENCEKIT_SAFETY_OUT")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "fencekit-porcupine-"+name+".html")
	f, err := os.Create(path)
	if err != nil {
		t.Errorf("porcupine visualisation: %v", err)
		return
	}
	defer f.Close()
	if err := lin.Visualize(f); err != nil {
		t.Errorf("porcupine visualisation: %v", err)
		return
	}
	if b, err := json.Marshal(ops); err == nil {
		_ = os.WriteFile(strings.TrimSuffix(path, ".html")+".json", b, 0o644)
	}
	t.Logf("porcupine: %s is not linearizable; see %s", name, path)
}

// closeCluster stops the cluster (Close stops the followers before the
// leader, and waits for etcd's server connections to go).
func closeCluster(c *etcdtest.Cluster) { _ = c.Close() }

// phaseEnv is what workloads need to set up their resources in a phase.
type phaseEnv struct {
	t    *testing.T
	dir  string           // temporary directory of the phase
	run  string           // unique name prefix of the phase
	etcd *clientv3.Client // the phase's cluster, for resources' verifiers
	// workloads counts the workloads of the run.
	workloads int
}

// shards returns how many shards a line has.
func (e *phaseEnv) shards(guarded bool) int {
	switch {
	case guarded && raceDetector:
		return guardedShardsRace / e.workloads
	case guarded:
		return guardedShards / e.workloads
	case raceDetector:
		return controlShardsRace
	}
	return controlShards
}

// line is one workload in one mode, as the phase runs it.
type line struct {
	spec lineSpec
	// inspect returns what the resource applied, in order, and its final
	// state.
	inspect func(ctx context.Context, shard int) (history []check.Write, final []int64, err error)
}

// workload builds the guarded and unguarded lines of one resource kind.
type workload struct {
	setup func(ctx context.Context, env *phaseEnv) (lines []line, cleanup func())
}

// ---- recording ----

// lineStats is what the workers of one shard of a line reported.
type lineStats struct {
	ops, rejected, failed, late int
	unknown, between, resolved  int            // of Release and Reenter
	lostRace                    map[string]int // released, but ended as lost: by cause
	acked                       []int64
	history                     []check.Op
	holds                       map[int64]*holdRec // by fencing token
}

// holdRec is one acquisition of a shard's lock: who held it, when Acquire
// returned, and when the holder first learned the hold was over (0: not
// yet), with the cause.
type holdRec struct {
	worker   int
	acq, end int64 // Unix nanoseconds
	cause    string
	// until is the lease's validity deadline when Acquire returned, and
	// asked when Acquire was called (Unix nanoseconds; 0: not reported).
	until, asked int64
}

func (s *lineStats) add(o *lineStats) {
	s.ops += o.ops
	s.rejected += o.rejected
	s.failed += o.failed
	s.late += o.late
	s.unknown += o.unknown
	s.between += o.between
	s.resolved += o.resolved
	for k, c := range o.lostRace {
		if s.lostRace == nil {
			s.lostRace = map[string]int{}
		}
		s.lostRace[k] += c
	}
	s.acked = append(s.acked, o.acked...)
}

// hold returns the record of the acquisition with token tok, making it.
func (s *lineStats) hold(tok int64) *holdRec {
	if s.holds == nil {
		s.holds = map[int64]*holdRec{}
	}
	h := s.holds[tok]
	if h == nil {
		h = &holdRec{worker: -1}
		s.holds[tok] = h
	}
	return h
}

// shardKey names one shard of one line.
type shardKey struct{ line, shard int }

// recorder collects the events of every worker of a phase.
type recorder struct {
	mu      sync.Mutex
	specs   []lineSpec
	stats   [][]*lineStats            // line, shard
	held    map[int]map[shardKey]bool // worker -> shards it holds
	guarded int                       // cycles started on guarded lines
	bad     []string
}

func newRecorder(specs []lineSpec) *recorder {
	r := &recorder{specs: specs, held: map[int]map[shardKey]bool{}}
	for _, sp := range specs {
		ss := make([]*lineStats, sp.Shards)
		for i := range ss {
			ss[i] = &lineStats{}
		}
		r.stats = append(r.stats, ss)
	}
	return r
}

func (r *recorder) record(ev event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Line < 0 || ev.Line >= len(r.stats) || ev.Shard < 0 || ev.Shard >= len(r.stats[ev.Line]) {
		r.bad = append(r.bad, fmt.Sprintf("event for no shard: %+v", ev))
		return
	}
	s := r.stats[ev.Line][ev.Shard]
	switch ev.Kind {
	case evAcquired, evEnded:
		if r.held[ev.Worker] == nil {
			r.held[ev.Worker] = map[shardKey]bool{}
		}
		r.held[ev.Worker][shardKey{ev.Line, ev.Shard}] = ev.Kind == evAcquired
		if ev.Kind == evAcquired && ev.Tok != 0 {
			h := s.hold(ev.Tok)
			h.worker, h.acq, h.until, h.asked = ev.Worker, ev.At, ev.Until, ev.Asked
		}
	case evSignal:
		if h := s.hold(ev.Tok); h.end == 0 || ev.At < h.end {
			h.end, h.cause = ev.At, ev.Msg
		}
	case evOp:
		s.ops++
		if r.specs[ev.Line].Guarded {
			r.guarded++
		}
	case evHist:
		if ev.Op != nil {
			s.history = append(s.history, *ev.Op)
		}
	case evUnknown:
		s.unknown++
	case evBetween:
		s.between++
	case evResolved:
		s.resolved++
	case evLostRace:
		if s.lostRace == nil {
			s.lostRace = map[string]int{}
		}
		s.lostRace[ev.Msg]++
	case evBad:
		if len(r.bad) < 20 {
			r.bad = append(r.bad, fmt.Sprintf("worker %d, %s shard %d: %s", ev.Worker, r.specs[ev.Line].Lock, ev.Shard, ev.Msg))
		}
	case evAck:
		s.acked = append(s.acked, ev.Elem)
	case evRejected:
		s.rejected++
	case evFailed:
		s.failed++
	case evLate:
		s.late++
	}
}

// guardedOps returns how many cycles the guarded lines started.
func (r *recorder) guardedOps() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.guarded
}

// history returns the operations recorded on one shard.
func (r *recorder) history(line, shard int) []check.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stats[line][shard].history)
}

// badEvents returns the errors outside lease's documented set.
func (r *recorder) badEvents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bad)
}

// heldBy returns the shards worker believes it holds.
func (r *recorder) heldBy(worker int) []shardKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []shardKey
	for k, h := range r.held[worker] {
		if h {
			ks = append(ks, k)
		}
	}
	return ks
}

// holding returns how many locks worker believes it holds.
func (r *recorder) holding(worker int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.held[worker] {
		if h {
			n++
		}
	}
	return n
}

// eventWriter decodes the JSON lines a worker process writes.
type eventWriter struct {
	rec *recorder
	mu  sync.Mutex
	buf []byte
	bad []string
}

func (w *eventWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		var ev event
		if err := json.Unmarshal(w.buf[:i], &ev); err != nil {
			w.bad = append(w.bad, string(w.buf[:i]))
		} else {
			w.rec.record(ev)
		}
		w.buf = w.buf[i+1:]
	}
}

func (w *eventWriter) garbage() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.bad)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// The process profile of the safety suite: one phase on three etcd
// members that run as server processes of the version FENCEKIT_ETCD_VERSION
// names (3.7 by default; or FENCEKIT_ETCD_BIN's binary), while the cluster
// nemesis freezes the leader or a follower with SIGSTOP past the lease TTL
// and kills them with SIGKILL (restarting them from their data dirs), and
// the other nemeses run as in TestSafety. Shorter than TestSafety: it runs
// once per server version.
const (
	procRun       = 20 * time.Second
	procMaxRun    = 30 * time.Second
	procTargetOps = 5000
)

// procKinds are the faults every run of the process profile must see.
var procKinds = []string{
	faults.KindMemberSigstop, faults.KindLeaderSigstop, faults.KindMemberSigkill, faults.KindLeaderSigkill,
	faults.KindPause, faults.KindRevoke, faults.KindDeleteKey, faults.KindSlowWriter,
}

// TestSafetyProcesses is the safety suite's process profile: see procRun.
func TestSafetyProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd server processes for half a minute")
	}
	t.Logf("etcd server %s", etcdproc.Version())
	runSafety(t, []phase{{name: "etcd3-proc", members: 3, share: 1, procs: true}}, procRun, procMaxRun, procTargetOps, procKinds)
}
