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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
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
// without FENCEKIT_SOAK. Setup and teardown add a few seconds.
const defaultRun = 26 * time.Second

// Workers per phase: in-process workers can be slowed (slow-writer),
// worker processes can be paused; all can be partitioned.
const (
	inProcessWorkers = 2
	processWorkers   = 2
)

// Minimum number of fault kinds every guarded line must have seen.
const minFaultKinds = 5

// phase is one cluster configuration of the run.
type phase struct {
	name    string
	members int
	share   float64 // of the run time
}

var phases = []phase{
	{name: "etcd1", members: 1, share: 0.4},
	{name: "etcd3", members: 3, share: 0.6},
}

// totals adds up one line (workload and mode) over the phases.
type totals struct {
	workload, mode          string
	ops, accepted, rejected int
	failed, late            int
	violations, lost        int
	faults                  map[string]int
	examples                []string
}

func (s *totals) line() string {
	kinds := slices.Sorted(maps.Keys(s.faults))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s:%d", k, s.faults[k]))
	}
	f := strings.Join(parts, ",")
	if f == "" {
		f = "none"
	}
	return fmt.Sprintf("SAFETY workload=%s mode=%s ops=%d accepted=%d rejected=%d faults=%s violations=%d lost=%d",
		s.workload, s.mode, s.ops, s.accepted, s.rejected, f, s.violations, s.lost)
}

// TestSafety is the Jepsen-style safety suite: see the package doc.
func TestSafety(t *testing.T) {
	run := defaultRun
	if v := os.Getenv(envSoak); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 10m", envSoak, v)
		}
		run = d
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
		dur := time.Duration(float64(run) * ph.share)
		t.Run(ph.name, func(t *testing.T) {
			runPhase(t, i, ph, dur, workloads, func(spec lineSpec) *totals {
				key := spec.Workload + "/" + spec.mode()
				if all[key] == nil {
					all[key] = &totals{workload: spec.Workload, mode: spec.mode(), faults: map[string]int{}}
					order = append(order, key)
				}
				return all[key]
			})
		})
		if t.Failed() {
			break
		}
	}
	t.Logf("run took %v", time.Since(start).Round(100*time.Millisecond))

	for _, key := range order {
		s := all[key]
		fmt.Println(s.line())
		switch s.mode {
		case "guarded":
			if s.violations != 0 || s.lost != 0 {
				t.Errorf("%s/guarded: %d violations, %d lost; first: %v", s.workload, s.violations, s.lost, s.examples)
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

func runPhase(t *testing.T, idx int, ph phase, dur time.Duration, workloads []workload, totalsFor func(lineSpec) *totals) {
	ctx, cancel := context.WithTimeout(context.Background(), dur+2*time.Minute)
	defer cancel()
	setupStart := time.Now()
	defer func() { t.Logf("phase took %v in all", time.Since(setupStart).Round(time.Millisecond)) }()
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: t.TempDir(), Members: ph.members, NoFsync: true})
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
	env := &phaseEnv{t: t, dir: t.TempDir(), run: fmt.Sprintf("fks%x", rand.Uint32()), etcd: admin}
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
	rec := newRecorder(len(lines))

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

	// Nemeses, for dur.
	n := &nemesis{t: t, phase: idx, rec: rec, admin: admin, cluster: cluster, workers: workers, lines: lines, counts: make([]map[string]int, len(lines))}
	for i := range n.counts {
		n.counts[i] = map[string]int{}
	}
	t.Logf("setup took %v", time.Since(setupStart).Round(time.Millisecond))
	nctx, stopNemeses := context.WithTimeout(ctx, dur)
	defer stopNemeses()
	var nem sync.WaitGroup
	nem.Go(func() { n.processFaults(nctx) })
	nem.Go(func() { n.leaseFaults(nctx) })
	if ph.members > 1 {
		nem.Go(func() { n.clusterFaults(nctx) })
	}
	began := time.Now()
	<-nctx.Done()
	nem.Wait() // every fault healed
	healed := time.Now()
	stopWorkers()
	stopProcs()
	inProc.Wait()
	t.Logf("phase ran %v; healing took %v, stopping workers %v", healed.Sub(began).Round(time.Millisecond),
		healed.Sub(began.Add(dur)).Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))

	// Check every line.
	for i, l := range lines {
		history, final, err := l.inspect(ctx)
		if err != nil {
			t.Errorf("%s/%s: inspect: %v", l.spec.Workload, l.spec.mode(), err)
			continue
		}
		st := rec.stats[i]
		v, err := check.Check(history, st.acked, final)
		if err != nil {
			t.Errorf("%s/%s: %v", l.spec.Workload, l.spec.mode(), err)
			continue
		}
		tot := totalsFor(l.spec)
		tot.ops += st.ops
		tot.accepted += len(st.acked)
		tot.rejected += st.rejected
		tot.failed += st.failed
		tot.late += st.late
		tot.violations += v.Violations
		tot.lost += v.Lost
		for _, p := range v.Problems[:min(len(v.Problems), 5)] {
			tot.examples = append(tot.examples, p.String())
		}
		for k, c := range n.counts[i] {
			tot.faults[k] += c
		}
		t.Logf("%s/%s: ops=%d acked=%d rejected=%d failed=%d late=%d applied=%d final=%d backwards=%d interleaved=%d lost=%d faults=%v",
			l.spec.Workload, l.spec.mode(), st.ops, len(st.acked), st.rejected, st.failed, st.late,
			len(history), len(final), v.Backwards, v.Interleaved, v.Lost, n.counts[i])
	}
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
}

// line is one workload in one mode, as the phase runs it.
type line struct {
	spec lineSpec
	// inspect returns what the resource applied, in order, and its final
	// state.
	inspect func(ctx context.Context) (history []check.Write, final []int64, err error)
}

// workload builds the guarded and unguarded lines of one resource kind.
type workload struct {
	setup func(ctx context.Context, env *phaseEnv) (lines []line, cleanup func())
}

// ---- recording ----

// lineStats is what the workers of one line reported.
type lineStats struct {
	ops, rejected, failed, late int
	acked                       []int64
}

// recorder collects the events of every worker of a phase.
type recorder struct {
	mu    sync.Mutex
	stats []*lineStats
	held  map[int]map[int]bool // worker -> lines it holds
}

func newRecorder(lines int) *recorder {
	r := &recorder{held: map[int]map[int]bool{}}
	for range lines {
		r.stats = append(r.stats, &lineStats{})
	}
	return r
}

func (r *recorder) record(ev event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Line < 0 || ev.Line >= len(r.stats) {
		return
	}
	s := r.stats[ev.Line]
	switch ev.Kind {
	case evAcquired, evEnded:
		if r.held[ev.Worker] == nil {
			r.held[ev.Worker] = map[int]bool{}
		}
		r.held[ev.Worker][ev.Line] = ev.Kind == evAcquired
	case evOp:
		s.ops++
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
