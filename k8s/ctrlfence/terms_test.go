package ctrlfence_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/k8s/ctrlfence"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"github.com/fencekit/fencekit/k8s/kubetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// termsWorld records the terms of a TermRunner and what their
// controllers reconciled.
type termsWorld struct {
	mu       sync.Mutex
	terms    []fence.Token
	running  int // controllers running
	overlaps []string
	recs     []fence.Token // the token of each reconcile, in order
}

// TestTermRunnerRealAPIServer: one manager, never restarted, elects
// through a TermRunner (the manager itself does not elect) on a real API
// server; each term builds a controller on the manager's cache that
// reconciles config maps with the term's token. Its terms are lost again
// and again (its etcd session revoked): every term's controller must have
// returned before the next term's starts, tokens rise strictly, every
// reconcile of a term carries that term's token, the manager keeps
// running, and its health probe, scraped over HTTP, answers 200 in every
// term.
func TestTermRunnerRealAPIServer(t *testing.T) {
	s := kubetest.Start(t, kubetest.Config{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "terms"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := etcdtest.Start(t)
	lock, err := fencelock.New(c.Client(t), "orders", "pod-0", fencelock.WithTTL(time.Second), fencelock.WithSafetyMargin(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	probe := freeAddr(t)
	mgr, err := manager.New(s.AdminConfig(), manager.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probe,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.AddHealthzCheck("fencekit", ctrlfence.HealthCheck(lock)); err != nil {
		t.Fatal(err)
	}
	w := &termsWorld{}
	skip := true
	runner, err := ctrlfence.NewTermRunner(lock, fencelock.Terms{
		Elector: leaderelection.LeaderElectionConfig{
			LeaseDuration: time.Second, RenewDeadline: 400 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		},
		StopTimeout: 5 * time.Second,
		New: func(ctx context.Context) ([]fencelock.Runnable, error) {
			tok, _ := fence.FromContext(ctx)
			ctl, err := controller.NewUnmanaged("orders", controller.Options{
				SkipNameValidation: &skip,
				Reconciler: reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
					got, _ := fence.FromContext(ctx)
					w.mu.Lock()
					w.recs = append(w.recs, got)
					w.mu.Unlock()
					if got != tok {
						return reconcile.Result{}, fmt.Errorf("reconcile of term %d carries token %v", tok.Revision, got)
					}
					return reconcile.Result{}, nil
				}),
			})
			if err != nil {
				return nil, err
			}
			if err := ctl.Watch(source.Kind(mgr.GetCache(), &corev1.ConfigMap{}, &handler.TypedEnqueueRequestForObject[*corev1.ConfigMap]{})); err != nil {
				return nil, err
			}
			w.mu.Lock()
			w.terms = append(w.terms, tok)
			w.mu.Unlock()
			return []fencelock.Runnable{ctrlfence.Runnable("orders", manager.RunnableFunc(func(ctx context.Context) error {
				w.mu.Lock()
				if w.running > 0 {
					w.overlaps = append(w.overlaps, fmt.Sprintf("term %d's controller started while another ran", tok.Revision))
				}
				w.running++
				w.mu.Unlock()
				defer func() {
					w.mu.Lock()
					w.running--
					w.mu.Unlock()
				}()
				return ctl.Start(ctx)
			}))}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(runner); err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()

	want := 10
	if v, err := strconv.Atoi(os.Getenv("FENCEKIT_K8S_MANAGER_TERMS")); err == nil && v > 0 {
		want = v
	}
	admin2 := c.Client(t)
	for i := range want {
		waitFor(t, 15*time.Second, fmt.Sprintf("term %d", i+1), func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.terms) > i
		})
		// A change of a config map is reconciled by this term's controller.
		name := fmt.Sprintf("cm-%d", i)
		w.mu.Lock()
		seen := len(w.recs) // before the create: its reconcile may come before Create returns
		w.mu.Unlock()
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if t.Failed() {
				w.mu.Lock()
				t.Logf("terms %v, %d reconciles, %d controllers running, lock: %v", w.terms, len(w.recs), w.running, lock.Check(nil))
				w.mu.Unlock()
			}
		}()
		waitFor(t, 10*time.Second, fmt.Sprintf("a reconcile in term %d", i+1), func() bool {
			select {
			case err := <-mgrDone:
				t.Fatalf("the manager stopped in term %d: %v", i+1, err)
			default:
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.recs) > seen
		})
		if code := scrape(t, "http://"+probe+"/healthz"); code != http.StatusOK {
			t.Errorf("term %d: /healthz answered %d", i+1, code)
		}
		if err := faults.Apply(ctx, faults.RevokeHolder(admin2, faults.LockPrefix(lease.DefaultPrefix, "orders")), 0); err != nil && !errors.Is(err, faults.ErrOutcomeUnknown) {
			t.Fatal(err)
		}
		select {
		case err := <-mgrDone:
			t.Fatalf("the manager stopped after term %d: %v", i+1, err)
		default:
		}
	}
	cancel()
	if err := <-mgrDone; err != nil {
		t.Fatalf("manager: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.overlaps) > 0 {
		t.Errorf("%v", w.overlaps)
	}
	for i := 1; i < len(w.terms); i++ {
		if w.terms[i].Revision <= w.terms[i-1].Revision {
			t.Errorf("term %d's token %d not above %d", i, w.terms[i].Revision, w.terms[i-1].Revision)
		}
	}
	t.Logf("one manager, %d terms (tokens strictly rising), %d reconciles each with its term's token; /healthz 200 in every term",
		len(w.terms), len(w.recs))
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func scrape(t *testing.T, u string) int {
	t.Helper()
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var last error
	for range 50 {
		resp, err := cl.Get(u)
		if err == nil {
			_ = resp.Body.Close()
			return resp.StatusCode
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("scrape %s: %v", u, last)
	return 0
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
