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

	// The service.
	svcCli, err := etcd.NewClient()
	if err != nil {
		return err
	}
	defer svcCli.Close()
	reg := prometheus.NewRegistry()
	srv, base, err := startService(svcCli, reg)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Println("fenced report service at", base)

	// Worker A reaches etcd through a proxy whose link we can cut, to
	// play a process frozen by a long GC pause (or cut off by the
	// network); worker B reaches it directly.
	proxy, err := etcd.NewProxy(etcd.Members()[0])
	if err != nil {
		return err
	}
	defer proxy.Close()
	freeze := faults.Partition(proxy)
	tr := &guard.Transport{Base: &http.Transport{}}
	defer tr.CloseIdleConnections()
	newWorker := func(name string, connect func() (*clientv3.Client, error)) (*worker, func(), error) {
		cli, err := connect()
		if err != nil {
			return nil, nil, err
		}
		locks, err := lease.New(cli, lease.WithTTL(time.Second))
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		closeAll := func() {
			locks.Close()
			cli.Close()
		}
		return &worker{name: name, locks: locks, client: &http.Client{Transport: tr}, base: base}, closeAll, nil
	}
	a, closeA, err := newWorker("A", func() (*clientv3.Client, error) { return etcd.NewClientThrough(proxy) })
	if err != nil {
		return err
	}
	defer func() {
		_ = freeze.Heal(context.Background()) // let A's Close reach etcd
		closeA()
	}()
	b, closeB, err := newWorker("B", func() (*clientv3.Client, error) { return etcd.NewClient() })
	if err != nil {
		return err
	}
	defer closeB()

	// 1. A holds the lease and writes.
	leaseA, err := a.locks.Acquire(ctx, "reports")
	if err != nil {
		return err
	}
	fmt.Println("A acquired lock reports, fencing token", leaseA.Fence())
	if _, err := a.put(ctx, leaseA, "q3", "draft by A"); err != nil {
		return err
	}

	// 2. A freezes past its TTL: its lease ends.
	if err := freeze.Inject(ctx); err != nil {
		return err
	}
	<-leaseA.Done()
	fmt.Println("A paused; its lease ended:", errors.Is(leaseA.Err(), lease.ErrLost))

	// 3. B takes over and writes.
	leaseB, err := b.locks.Acquire(ctx, "reports")
	if err != nil {
		return err
	}
	fmt.Println("B acquired lock reports, fencing token", leaseB.Fence())
	if _, err := b.put(ctx, leaseB, "q3", "final by B"); err != nil {
		return err
	}

	// 4. A wakes and writes with its old token: refused.
	if err := freeze.Heal(ctx); err != nil {
		return err
	}
	status, err := a.put(ctx, leaseA, "q3", "late edit by A")
	if err != nil {
		return err
	}
	if status != guard.HTTPStatus(fence.Stale) {
		return fmt.Errorf("late write of worker A got %d, want %d", status, guard.HTTPStatus(fence.Stale))
	}

	// A write without a token is refused too.
	resp, err := http.Post(base+"/reports/q3", "text/plain", strings.NewReader("anonymous"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Println("POST without a token:", resp.Status)

	// So is a made-up token far above any real one: the service verifies
	// it against the lock records, and the mark does not move.
	req, err := http.NewRequest(http.MethodPut, base+"/reports/q3", strings.NewReader("forged"))
	if err != nil {
		return err
	}
	req.Header.Set(guard.Header, "1099511627776:reports")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Println("PUT with a forged token 1099511627776:reports:", resp.Status)
	if resp.StatusCode != guard.HTTPStatus(fence.Unverified) {
		return fmt.Errorf("forged token got %d, want %d", resp.StatusCode, guard.HTTPStatus(fence.Unverified))
	}

	// 5. B's report is intact.
	resp, err = http.Get(base + "/reports/q3")
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
	if err := leaseB.Release(ctx); err != nil {
		return fmt.Errorf("release of worker B: %w", err)
	}
	fmt.Println("B released")

	n, err := decisions(reg)
	if err != nil {
		return err
	}
	fmt.Printf("guard decisions: accepted %v, stale %v, missing %v, unverified %v\n",
		n["accepted"], n["stale"], n["missing"], n["unverified"])
	return nil
}
