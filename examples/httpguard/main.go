// Command httpguard runs a fenced HTTP service and two workers on an embedded
// etcd in a temporary directory (started with the public test harness,
// integration/etcdtest). The service keeps reports and fences writes with
// guard's middleware, its marks kept in etcd. Worker A holds the "reports"
// lease and writes; its link to etcd is then cut (integration/faults) for
// longer than the lease's TTL, so its lease ends and worker B takes over and
// writes; when A wakes and writes with its old token, the service answers 409
// Conflict with a problem+json body, and B's report stays; a made-up token is
// refused with 403, since the service verifies new tokens against the lock
// records. It prints what happened, exits 0, and leaves nothing behind.
//
//	go run ./examples/httpguard
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// reports is the service's data: only the holder of lock "reports" may
// write it.
type reports struct {
	mu   sync.Mutex
	docs map[string]string
}

func (s *reports) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/reports/")
	switch r.Method {
	case http.MethodGet:
		s.mu.Lock()
		doc, ok := s.docs[name]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, doc)
	case http.MethodPut:
		// The guard admitted the request: its token is in the context.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.docs[name] = string(body)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// route fences PUT /reports/{name}, one resource per report, bound to the
// lock "reports".
func route(r *http.Request) (guard.Target, bool) {
	name, ok := strings.CutPrefix(r.URL.Path, "/reports/")
	if !ok || name == "" {
		return guard.Target{}, false
	}
	return guard.Target{Resource: "report/" + name, Lock: "reports"}, true
}

// startService serves the fenced reports on a loopback port; the marks
// live in etcd under /httpguard/marks/, shared by any replica. Tokens
// arrive from the network, so a token that would raise a mark is
// verified against the lock records first (in the same Txn, since marks
// and locks share the cluster).
func startService(cli *clientv3.Client, reg prometheus.Registerer) (*http.Server, string, error) {
	store, err := etcdstore.New(cli, "/httpguard/marks/")
	if err != nil {
		return nil, "", err
	}
	verifier, err := lease.NewVerifier(cli, lease.DefaultPrefix)
	if err != nil {
		return nil, "", err
	}
	g, err := guard.New(store, guard.WithMetrics(reg), guard.WithVerifier(verifier))
	if err != nil {
		return nil, "", err
	}
	fenced := g.Middleware(route)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: fenced(&reports{docs: map[string]string{}}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return srv, "http://" + ln.Addr().String(), nil
}

// decisions reads fencekit_guard_decisions_total back from reg, by
// outcome, as a Prometheus server scraping the service would.
func decisions(reg prometheus.Gatherer) (map[string]float64, error) {
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	n := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "fencekit_guard_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					n[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n, nil
}

// worker is one process that writes reports while it holds the lease.
type worker struct {
	name   string
	locks  *lease.Client
	client *http.Client // sends the token in each request's context
	base   string
}

// put writes a report with the token of l and describes the answer.
func (w *worker) put(ctx context.Context, l *lease.Lease, report, body string) (int, error) {
	req, err := http.NewRequestWithContext(fence.NewContext(ctx, l.Fence()), http.MethodPut, w.base+"/reports/"+report, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	fmt.Printf("%s PUT %q with token %s: %s\n", w.name, body, l.Fence(), resp.Status)
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var p guard.Problem
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			return 0, err
		}
		fmt.Printf("  problem: %s (resource %s, token %s, mark %s)\n", p.Title, p.Resource, p.Token, p.Mark)
	}
	return resp.StatusCode, nil
}

// story is the example's cast: the service, the two workers, and the
// fault that freezes worker A.
type story struct {
	base     string
	reg      *prometheus.Registry
	freeze   faults.Fault
	a, b     *worker
	leaseA   *lease.Lease
	leaseB   *lease.Lease
	cleanups []func()
}

// onCleanup registers f to run at cleanup, after those registered later.
func (s *story) onCleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// cleanup runs the registered functions, the last first.
func (s *story) cleanup() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// One etcd member, its data in a temporary directory that Close
	// removes.
	etcd, err := etcdtest.StartCluster(ctx, etcdtest.Config{})
	if err != nil {
		return err
	}
	defer etcd.Close()

	s := &story{reg: prometheus.NewRegistry()}
	defer s.cleanup()
	if err := s.startService(etcd); err != nil {
		return err
	}
	if err := s.startWorkers(etcd); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{
		s.aWrites, s.aFreezes, s.bTakesOver, s.aWritesLate,
		s.anonymousRefused, s.forgedRefused, s.reportIntact, s.printDecisions,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// startService starts the fenced report service, with its own etcd client.
func (s *story) startService(etcd *etcdtest.Cluster) error {
	cli, err := etcd.NewClient()
	if err != nil {
		return err
	}
	s.onCleanup(func() { cli.Close() })
	srv, base, err := startService(cli, s.reg)
	if err != nil {
		return err
	}
	s.onCleanup(func() { srv.Close() })
	s.base = base
	fmt.Println("fenced report service at", base)
	return nil
}

// startWorkers starts the workers. Worker A reaches etcd through a proxy
// whose link we can cut, to play a process frozen by a long GC pause (or
// cut off by the network); worker B reaches it directly.
func (s *story) startWorkers(etcd *etcdtest.Cluster) error {
	proxy, err := etcd.NewProxy(etcd.Members()[0])
	if err != nil {
		return err
	}
	s.onCleanup(func() { proxy.Close() })
	s.freeze = faults.Partition(proxy)
	tr := &guard.Transport{Base: &http.Transport{}}
	s.onCleanup(tr.CloseIdleConnections)
	if s.a, err = s.newWorker("A", tr, func() (*clientv3.Client, error) { return etcd.NewClientThrough(proxy) }); err != nil {
		return err
	}
	s.onCleanup(func() { _ = s.freeze.Heal(context.Background()) }) // let A's Close reach etcd
	s.b, err = s.newWorker("B", tr, func() (*clientv3.Client, error) { return etcd.NewClient() })
	return err
}

// newWorker starts a worker whose lease client connects with connect.
func (s *story) newWorker(name string, tr http.RoundTripper, connect func() (*clientv3.Client, error)) (*worker, error) {
	cli, err := connect()
	if err != nil {
		return nil, err
	}
	locks, err := lease.New(cli, lease.WithTTL(time.Second))
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.onCleanup(func() {
		locks.Close()
		cli.Close()
	})
	return &worker{name: name, locks: locks, client: &http.Client{Transport: tr}, base: s.base}, nil
}

// 1. A holds the lease and writes.
func (s *story) aWrites(ctx context.Context) error {
	var err error
	if s.leaseA, err = s.a.locks.Acquire(ctx, "reports"); err != nil {
		return err
	}
	fmt.Println("A acquired lock reports, fencing token", s.leaseA.Fence())
	_, err = s.a.put(ctx, s.leaseA, "q3", "draft by A")
	return err
}

// 2. A freezes past its TTL: its lease ends.
func (s *story) aFreezes(ctx context.Context) error {
	if err := s.freeze.Inject(ctx); err != nil {
		return err
	}
	<-s.leaseA.Done()
	fmt.Println("A paused; its lease ended:", errors.Is(s.leaseA.Err(), lease.ErrLost))
	return nil
}

// 3. B takes over and writes.
func (s *story) bTakesOver(ctx context.Context) error {
	var err error
	if s.leaseB, err = s.b.locks.Acquire(ctx, "reports"); err != nil {
		return err
	}
	fmt.Println("B acquired lock reports, fencing token", s.leaseB.Fence())
	_, err = s.b.put(ctx, s.leaseB, "q3", "final by B")
	return err
}

// 4. A wakes and writes with its old token: refused.
func (s *story) aWritesLate(ctx context.Context) error {
	if err := s.freeze.Heal(ctx); err != nil {
		return err
	}
	status, err := s.a.put(ctx, s.leaseA, "q3", "late edit by A")
	if err != nil {
		return err
	}
	if status != guard.HTTPStatus(fence.Stale) {
		return fmt.Errorf("late write of worker A got %d, want %d", status, guard.HTTPStatus(fence.Stale))
	}
	return nil
}

// A write without a token is refused too.
func (s *story) anonymousRefused(context.Context) error {
	resp, err := http.Post(s.base+"/reports/q3", "text/plain", strings.NewReader("anonymous"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Println("POST without a token:", resp.Status)
	return nil
}

// So is a made-up token far above any real one: the service verifies it
// against the lock records, and the mark does not move.
func (s *story) forgedRefused(context.Context) error {
	req, err := http.NewRequest(http.MethodPut, s.base+"/reports/q3", strings.NewReader("forged"))
	if err != nil {
		return err
	}
	req.Header.Set(guard.Header, "1099511627776:reports")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Println("PUT with a forged token 1099511627776:reports:", resp.Status)
	if resp.StatusCode != guard.HTTPStatus(fence.Unverified) {
		return fmt.Errorf("forged token got %d, want %d", resp.StatusCode, guard.HTTPStatus(fence.Unverified))
	}
	return nil
}

// 5. B's report is intact.
func (s *story) reportIntact(ctx context.Context) error {
	resp, err := http.Get(s.base + "/reports/q3")
	if err != nil {
		return err
	}
	doc, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	fmt.Printf("GET report q3: %q\n", doc)
	if string(doc) != "final by B" {
		return fmt.Errorf("report q3 is %q, want B's", doc)
	}
	if err := s.leaseB.Release(ctx); err != nil {
		return fmt.Errorf("release of worker B: %w", err)
	}
	fmt.Println("B released")
	return nil
}

// printDecisions prints the guard's decisions, as its metrics count them.
func (s *story) printDecisions(context.Context) error {
	n, err := decisions(s.reg)
	if err != nil {
		return err
	}
	fmt.Printf("guard decisions: accepted %v, stale %v, missing %v, unverified %v\n",
		n["accepted"], n["stale"], n["missing"], n["unverified"])
	return nil
}
