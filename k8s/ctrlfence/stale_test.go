package ctrlfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/k8s/ctrlfence"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"github.com/fencekit/fencekit/k8s/kubetest"
	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The stale-leader story against a real API server: two candidates, each
// a controller-runtime manager (real informers, its client fenced with
// NewManagerClient) that elects through fencelock with a Lock on its own
// etcd client behind fault proxies; the leader's two reconcilers read
// three config maps from the manager's cache and write them with the
// term's token. Each failover pauses the leader's writer holding its
// token, cuts the leader off from etcd (not from the API server), waits
// until the successor leads and has written every object, then lets the
// old writer go on with the token it holds: its late Update of what its
// informer cache holds is refused as stale or, when the cache is behind,
// conflicts; its late Update of a fresh read and its late merge patch are
// refused as stale. A manager leads once; the deposed one is replaced by a new
// manager, which campaigns again. At the end every object's accepted
// writes, in resourceVersion order, carry non-decreasing tokens.
const (
	staleTTL     = time.Second
	staleMargin  = 200 * time.Millisecond
	staleObjects = 3
)

type staleWorld struct {
	t      *testing.T
	cfg    *rest.Config
	etcd   *etcdtest.Cluster
	cands  [2]*staleCand
	staleN int // late updates refused as stale (the others conflicted)

	mu       sync.Mutex
	leader   *staleCand
	tok      fence.Token
	wrote    map[string]fence.Token // object -> token of the leader's newest accepted write
	accepted map[string][]acceptedWrite
	late     []error   // the late writes' errors
	refused  time.Time // when the first late write of the last failover was refused
}

type acceptedWrite struct {
	rv  int64
	tok fence.Token
}

type staleCand struct {
	id      int
	w       *staleWorld
	proxies []*faults.Proxy
	cli     *clientv3.Client

	mu     sync.Mutex
	ended  time.Time     // when its last term's ctx was cancelled
	pause  chan struct{} // non-nil: the writer stops at its next write
	paused chan struct{} // closed when it has stopped, holding its token
	done   chan struct{} // closed when its late writes are done
}

func TestStaleLeaderRefusedByAPIServer(t *testing.T) {
	for _, tc := range []struct{ members, failovers int }{{1, 50}, {3, 20}} {
		if testing.Short() {
			tc.failovers /= 5
		}
		t.Run(fmt.Sprintf("members=%d", tc.members), func(t *testing.T) { staleLeader(t, tc.members, tc.failovers) })
	}
}

// staleLeader runs the story with fencekit's etcd of members members.
func staleLeader(t *testing.T, members, failovers int) {
	s := kubetest.Start(t, kubetest.Config{Users: []kubetest.User{{Name: "controller"}}})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	setUpPolicy(t, admin)
	cfg, err := s.Config("controller")
	mustOK(t, err)
	w := &staleWorld{t: t, cfg: cfg, wrote: map[string]fence.Token{}, accepted: map[string][]acceptedWrite{}}
	w.etcd = etcdtest.Start(t, etcdtest.WithMembers(members))
	for i := range w.cands {
		ps := w.etcd.Proxies(t)
		w.cands[i] = &staleCand{id: i, w: w, proxies: ps, cli: w.etcd.ClientThrough(t, ps...)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, cd := range w.cands {
		wg.Go(func() { cd.run(ctx) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	var firstRefusal []time.Duration
	for i := range failovers {
		firstRefusal = append(firstRefusal, w.failover(i))
		if t.Failed() {
			return
		}
	}
	accepted := w.check(failovers)
	slices.Sort(firstRefusal)
	t.Logf("%d failovers, %d writes accepted in token order, %d late writes all kept out "+
		"(of the updates of cached objects %d refused as stale, the others conflicted; every update of a fresh read "+
		"and every patch refused as stale); "+
		"term end to first refusal: median %v, max %v", failovers, accepted, len(w.late), w.staleN,
		firstRefusal[len(firstRefusal)/2], firstRefusal[len(firstRefusal)-1])
}

// mustOK ends the test on err.
func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run runs a manager for cd, and a new one each time one stops (it leads
// once), until ctx ends.
func (cd *staleCand) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := cd.runManager(ctx); err != nil && ctx.Err() == nil {
			cd.w.t.Errorf("cand-%d: %v", cd.id, err)
			return
		}
	}
}

// runManager runs one manager until it stops leading or ctx ends.
func (cd *staleCand) runManager(ctx context.Context) error {
	lock, err := fencelock.New(cd.cli, "orders", fmt.Sprintf("cand-%d", cd.id),
		fencelock.WithTTL(staleTTL), fencelock.WithSafetyMargin(staleMargin))
	if err != nil {
		return err
	}
	defer lock.Close()
	ld, rd, rp := staleTTL, 400*time.Millisecond, 100*time.Millisecond
	opts, err := ctrlfence.Options(lock, manager.Options{
		Logger:                  logr.Discard(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		LeaseDuration:           &ld,
		RenewDeadline:           &rd,
		RetryPeriod:             &rp,
		GracefulShutdownTimeout: new(5 * time.Second),
		NewClient:               ctrlfence.NewManagerClient,
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{"fenced": {}}},
	})
	if err != nil {
		return err
	}
	m, err := manager.New(cd.w.cfg, opts)
	if err != nil {
		return err
	}
	c, r := m.GetClient(), m.GetAPIReader()
	if err := m.Add(manager.RunnableFunc(func(ctx context.Context) error {
		cd.lead(ctx, c, r)
		return nil
	})); err != nil {
		return err
	}
	err = m.Start(ctx)
	if err != nil && strings.Contains(err.Error(), "leader election lost") {
		return nil // deposed: a new manager campaigns again
	}
	return err
}

// lead is the leader's runnable: write every object with ctx's token
// through c until ctx ends, or until paused: then, once released, write
// late with the token.
func (cd *staleCand) lead(ctx context.Context, c client.Client, r client.Reader) {
	w := cd.w
	tok, ok := fence.FromContext(ctx)
	if !ok {
		w.t.Error("OnStartedLeading's ctx has no token")
		return
	}
	w.mu.Lock()
	w.leader, w.tok = cd, tok
	w.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		cd.mu.Lock()
		cd.ended = time.Now()
		cd.mu.Unlock()
	})
	defer stop()
	// A second reconciler writes alongside until the term ends or the
	// writer is paused; its last write may be in flight across the
	// failover, as a real one's would.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for n := 1; ctx.Err() == nil; n++ {
			cd.mu.Lock()
			pause := cd.pause
			cd.mu.Unlock()
			if pause != nil {
				return
			}
			w.write(ctx, c, tok, fmt.Sprintf("obj-%d", n%staleObjects))
			time.Sleep(5 * time.Millisecond)
		}
	})
	for n := 0; ctx.Err() == nil; n++ {
		cd.mu.Lock()
		pause, paused, done := cd.pause, cd.paused, cd.done
		cd.mu.Unlock()
		if pause != nil {
			close(paused)
			<-pause // the successor leads and has written
			// The term's ctx stops carrying the token when the term ends,
			// so a write made with it is stopped in the client, unsent.
			// The late writes are those that hold the token itself: a
			// request in flight, a process frozen mid-write.
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fenced", Name: "obj-0"}}
			if err := c.Update(context.WithoutCancel(ctx), cm); !errors.Is(err, fence.ErrMissing) {
				w.t.Errorf("a write with the ended term's ctx: want fence.ErrMissing, got %v", err)
			}
			w.lateWrites(fence.NewContext(context.Background(), tok), c, r, tok)
			close(done)
			<-ctx.Done()
			return
		}
		w.write(ctx, c, tok, fmt.Sprintf("obj-%d", n%staleObjects))
		time.Sleep(5 * time.Millisecond)
	}
}

// write reads name and writes it with tok, creating it when missing, and
// records an accepted write.
func (w *staleWorld) write(ctx context.Context, c client.Client, tok fence.Token, name string) {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: "fenced", Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fenced", Name: name}}
		cm.Data = map[string]string{"by": tok.String()}
		err = c.Create(ctx, cm)
	case err == nil:
		cm.Data = map[string]string{"by": tok.String()}
		err = c.Update(ctx, cm)
	}
	if err != nil {
		if ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) &&
			!errors.Is(err, fence.ErrStale) { // a successor may already lead
			w.t.Errorf("%s write %s: %v", tok, name, err)
		}
		return
	}
	w.recordAccepted(name, cm.ResourceVersion, tok)
}

func (w *staleWorld) recordAccepted(name, rv string, tok fence.Token) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		w.t.Errorf("resourceVersion %q: %v", rv, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.accepted[name] = append(w.accepted[name], acceptedWrite{n, tok})
	if tok == w.tok {
		w.wrote[name] = tok
	}
}

// lateWrites writes every object with the old token three ways: an
// Update of what c's cache holds (refused as stale, or a Conflict when
// the cache is behind), an Update of a fresh read through r (its
// resourceVersion current: refused as stale) and a merge patch (refused
// as stale).
func (w *staleWorld) lateWrites(ctx context.Context, c client.Client, r client.Reader, tok fence.Token) {
	for i := range staleObjects {
		key := client.ObjectKey{Namespace: "fenced", Name: fmt.Sprintf("obj-%d", i)}
		cached, fresh := &corev1.ConfigMap{}, &corev1.ConfigMap{}
		if err := errors.Join(c.Get(ctx, key, cached), r.Get(ctx, key, fresh)); err != nil {
			w.t.Errorf("late read %s: %v", key.Name, err)
			continue
		}
		orig := cached.DeepCopy()
		late := map[string]string{"by": "late " + tok.String()}
		cached.Data, fresh.Data = late, late
		fromCache := c.Update(ctx, cached.DeepCopy())
		fromRead := c.Update(ctx, fresh)
		patch := c.Patch(ctx, cached, client.MergeFrom(orig))
		w.mu.Lock()
		if w.refused.IsZero() {
			w.refused = time.Now()
		}
		w.late = append(w.late, fromCache, fromRead, patch)
		if isStaleRefusal(fromCache, tok) {
			w.staleN++
		}
		w.mu.Unlock()
		if !isStaleRefusal(fromCache, tok) && !apierrors.IsConflict(fromCache) {
			w.t.Errorf("late update of cached %s with %s: want a stale refusal or a conflict, got %v", key.Name, tok, fromCache)
		}
		for what, err := range map[string]error{"update of a fresh read": fromRead, "merge patch": patch} {
			if !isStaleRefusal(err, tok) {
				w.t.Errorf("late %s of %s with %s: want a stale refusal, got %v", what, key.Name, tok, err)
			}
		}
	}
}

// isStaleRefusal reports whether err is the API server's stale refusal
// of tok.
func isStaleRefusal(err error, tok fence.Token) bool {
	var r *fence.RefusedError
	return errors.As(err, &r) && r.Outcome == fence.Stale && r.Token == tok
}

// failover takes the current leader down as described above and returns
// the time from its term's end (its ctx cancelled) to its first refused
// late write, which waits for the successor to lead and write.
func (w *staleWorld) failover(i int) time.Duration {
	old, oldTok := w.waitLeader(fence.Token{}, "a leader that wrote every object")
	if old == nil {
		return 0
	}
	old.mu.Lock()
	old.pause, old.paused, old.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	pause, paused, done := old.pause, old.paused, old.done
	old.mu.Unlock()
	<-paused
	cut := faults.Partition(old.proxies...)
	mustOK(w.t, cut.Inject(context.Background()))
	if nw, _ := w.waitLeader(oldTok, "the successor to lead and write every object"); nw == nil {
		return 0
	}
	w.mu.Lock()
	w.refused = time.Time{}
	w.mu.Unlock()
	close(pause)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		w.t.Errorf("failover %d: the late writes did not finish", i)
	}
	mustOK(w.t, cut.Heal(context.Background()))
	old.mu.Lock()
	old.pause, old.paused, old.done = nil, nil, nil
	old.mu.Unlock()
	old.mu.Lock()
	ended := old.ended
	old.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refused.IsZero() || ended.IsZero() {
		w.t.Errorf("failover %d: no term end or no refusal", i)
		return 0
	}
	return w.refused.Sub(ended)
}

// waitLeader waits until a leader with a token newer than after has
// written every object, and returns it and its token.
func (w *staleWorld) waitLeader(after fence.Token, what string) (*staleCand, fence.Token) {
	deadline := time.Now().Add(staleTTL + 10*time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		cd, tok, all := w.leader, w.tok, len(w.wrote) == staleObjects
		for _, got := range w.wrote {
			all = all && got == tok
		}
		w.mu.Unlock()
		if cd != nil && tok.Revision > after.Revision && all {
			return cd, tok
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Errorf("timed out waiting for %s", what)
	return nil, fence.Token{}
}

// check asserts that every object's accepted writes, in resourceVersion
// order, carry non-decreasing tokens and that every failover made its late
// writes; it returns the number of accepted writes.
func (w *staleWorld) check(failovers int) (accepted int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, ws := range w.accepted {
		accepted += len(ws)
		slices.SortFunc(ws, func(a, b acceptedWrite) int { return int(a.rv - b.rv) })
		for i := 1; i < len(ws); i++ {
			if ws[i].tok.Revision < ws[i-1].tok.Revision {
				w.t.Errorf("%s: write %d with %s accepted after one with %s", name, ws[i].rv, ws[i].tok, ws[i-1].tok)
			}
		}
	}
	if len(w.late) != 3*staleObjects*failovers {
		w.t.Errorf("%d late writes, want %d", len(w.late), 3*staleObjects*failovers)
	}
	return accepted
}
