package ctrlfence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/k8s/ctrlfence"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// noAPIServer is a REST config that no part of these managers uses: with
// a custom resource lock, no metrics server, no health probes and no
// controllers that watch objects, manager.New and Start never contact
// the API server (nothing listens on port 1).
var noAPIServer = &rest.Config{Host: "http://127.0.0.1:1"}

type span struct {
	name        string
	tok         fence.Token
	start, stop time.Time
}

type history struct {
	mu       sync.Mutex
	spans    []*span
	overlaps []string
}

// runnable is a leader-election runnable that records when it runs.
func (h *history) runnable(name string) manager.RunnableFunc {
	return func(ctx context.Context) error {
		tok, _ := fence.FromContext(ctx)
		s := &span{name: name, tok: tok, start: time.Now()}
		h.mu.Lock()
		for _, o := range h.spans {
			if o.stop.IsZero() {
				h.overlaps = append(h.overlaps, name+" started while "+o.name+" ran")
			}
		}
		h.spans = append(h.spans, s)
		h.mu.Unlock()
		<-ctx.Done()
		h.mu.Lock()
		s.stop = time.Now()
		h.mu.Unlock()
		return nil
	}
}

// started waits for the n-th runnable start (from 0) and returns it.
func (h *history) started(t *testing.T, n int, d time.Duration) *span {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		if len(h.spans) > n {
			s := h.spans[n]
			h.mu.Unlock()
			return s
		}
		h.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no leader-election runnable started within %v", d)
	return nil
}

// stopTime reads s.stop under the lock.
func (h *history) stopTime(s *span) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return s.stop
}

type mgr struct {
	name    string
	lock    *fencelock.Lock
	proxies []*faults.Proxy
	cancel  context.CancelFunc
	done    chan error
}

func startManager(t *testing.T, c *etcdtest.Cluster, h *history, name string) *mgr {
	t.Helper()
	ps := c.Proxies(t)
	lock, err := fencelock.New(c.ClientThrough(t, ps...), "controller", name,
		fencelock.WithTTL(time.Second), fencelock.WithSafetyMargin(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Close() })
	ld, rd, rp := time.Second, 400*time.Millisecond, 100*time.Millisecond
	opts, err := ctrlfence.Options(lock, manager.Options{
		Logger:                  logr.Discard(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		LeaseDuration:           &ld,
		RenewDeadline:           &rd,
		RetryPeriod:             &rp,
		GracefulShutdownTimeout: new(5 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(noAPIServer, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Add(h.runnable(name)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mm := &mgr{name: name, lock: lock, proxies: ps, cancel: cancel, done: make(chan error, 1)}
	go func() { mm.done <- m.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-mm.done })
	return mm
}

func TestManagersTakeTurns(t *testing.T) {
	c := etcdtest.Start(t)
	h := &history{}
	ms := map[string]*mgr{}
	for _, n := range []string{"a", "b"} {
		ms[n] = startManager(t, c, h, n)
	}
	first := h.started(t, 0, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // the other manager must stay out
	if first.tok.Revision == 0 {
		t.Errorf("%s: the runnable's ctx carries no fencing token", first.name)
	}
	if got, err := ms[first.name].lock.Fence(); err != nil || got != first.tok {
		t.Errorf("%s: Lock.Fence() = %v, %v; the runnable's ctx carries %v", first.name, got, err, first.tok)
	}

	// The winner stops: its runnables stop, then it resigns.
	ms[first.name].cancel()
	if err := <-ms[first.name].done; err != nil {
		t.Errorf("%s: Start: %v", first.name, err)
	}
	ms[first.name].done <- nil // for the cleanup
	second := h.started(t, 1, 5*time.Second)
	if stop := h.stopTime(first); !stop.Before(second.start) {
		t.Errorf("%s started at %v, before %s stopped at %v", second.name, second.start, first.name, stop)
	}
	if second.tok.Revision <= first.tok.Revision {
		t.Errorf("second term %d not after first %d", second.tok.Revision, first.tok.Revision)
	}

	// A third manager waits; the leader is cut off from etcd: its
	// runnables' ctx is cancelled when its term ends, before the third
	// manager's start, and its manager stops with "leader election lost".
	third := startManager(t, c, h, "c")
	time.Sleep(300 * time.Millisecond)
	cut := faults.Partition(ms[second.name].proxies...)
	at := time.Now()
	if err := cut.Inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cut.Heal(context.Background()) }()
	next := h.started(t, 2, 5*time.Second)
	secondStop := h.stopTime(second)
	if next.name != third.name || secondStop.IsZero() || !secondStop.Before(next.start) {
		t.Errorf("after the partition: %s started at %v; %s stopped at %v", next.name, next.start, second.name, secondStop)
	}
	t.Logf("failover after the partition: %v (TTL 1 s); the cut-off runnable stopped %v before its successor started",
		next.start.Sub(at).Round(time.Millisecond), next.start.Sub(secondStop).Round(time.Millisecond))
	h.mu.Lock()
	for _, o := range h.overlaps {
		t.Error(o)
	}
	h.mu.Unlock()
	select {
	case err := <-ms[second.name].done:
		if err == nil {
			t.Errorf("%s: Start returned nil after its term was lost", second.name)
		}
		ms[second.name].done <- err
	case <-time.After(5 * time.Second):
		t.Errorf("%s: the manager did not stop after its term was lost", second.name)
	}
}

func TestOptionsRefuseDurations(t *testing.T) {
	c := etcdtest.Start(t)
	lock, err := fencelock.New(c.Client(t), "controller", "a", fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	// controller-runtime's defaults (15 s, 10 s, 2 s) with a 10 s TTL.
	ld, rd, rp := 15*time.Second, 10*time.Second, 2*time.Second
	in := manager.Options{LeaseDuration: &ld, RenewDeadline: &rd, RetryPeriod: &rp}
	got, err := ctrlfence.Options(lock, in)
	var de *fencelock.DurationError
	if !errors.As(err, &de) || !errors.Is(err, fencelock.ErrDurations) {
		t.Fatalf("Options: %v, want a *fencelock.DurationError", err)
	}
	t.Logf("refused: %v", err)
	if got.LeaderElection || got.LeaderElectionResourceLockInterface != nil || got.BaseContext != nil {
		t.Errorf("Options changed opts on error: %+v", got)
	}
	// Defaults from the Lock are accepted.
	got, err = ctrlfence.Options(lock, manager.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.LeaderElection || got.LeaderElectionResourceLockInterface != lock || got.LeaderElectionID != "controller" ||
		*got.LeaseDuration != 10*time.Second || *got.RenewDeadline+*got.RetryPeriod != 8*time.Second {
		t.Errorf("Options = %+v", got)
	}
}
