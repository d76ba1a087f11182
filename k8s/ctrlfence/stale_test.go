package ctrlfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The stale-leader story against a real API server: two candidates elect
// through fencelock (client-go's LeaderElector, each Lock on its own etcd
// client behind fault proxies) and the leader's two reconcilers write
// three config maps through ctrlfence.NewClient with its ctx's token. Each failover pauses
// the leader's writer holding its token, cuts the leader off from etcd
// (not from the API server), waits until the successor leads and has
// written every object, then lets the old writer go on: its late Update
// (after a fresh read, so no resourceVersion conflict saves it) and its
// late merge patch must be refused by the API server, each as a
// *fence.RefusedError with outcome stale. At the end every object's
// accepted writes, in resourceVersion order, carry non-decreasing tokens.
const (
	staleTTL     = time.Second
	staleMargin  = 200 * time.Millisecond
	staleObjects = 3
)

type staleWorld struct {
	t     *testing.T
	c     client.Client
	cands [2]*staleCand

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
	cfg     leaderelection.LeaderElectionConfig

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
	raw, err := client.NewWithWatch(cfg, client.Options{})
	mustOK(t, err)
	w := &staleWorld{t: t, c: ctrlfence.NewClient(raw), wrote: map[string]fence.Token{}, accepted: map[string][]acceptedWrite{}}

	etcd := etcdtest.Start(t, etcdtest.WithMembers(members))
	for i := range w.cands {
		ps := etcd.Proxies(t)
		lock, err := fencelock.New(etcd.ClientThrough(t, ps...), "orders", fmt.Sprintf("cand-%d", i),
			fencelock.WithTTL(staleTTL), fencelock.WithSafetyMargin(staleMargin))
		mustOK(t, err)
		t.Cleanup(func() { _ = lock.Close() })
		cd := &staleCand{id: i, w: w, proxies: ps}
		cd.cfg, err = lock.Config(leaderelection.LeaderElectionConfig{
			LeaseDuration: staleTTL, RenewDeadline: 400 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
			Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: cd.lead, OnStoppedLeading: func() {}},
		})
		mustOK(t, err)
		w.cands[i] = cd
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
	t.Logf("%d failovers, %d writes accepted in token order, %d late writes all refused as stale; "+
		"term end to first refusal: median %v, max %v", failovers, accepted, len(w.late),
		firstRefusal[len(firstRefusal)/2], firstRefusal[len(firstRefusal)-1])
}

// mustOK ends the test on err.
func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run runs cd's elector again and again until ctx ends.
func (cd *staleCand) run(ctx context.Context) {
	for ctx.Err() == nil {
		el, err := leaderelection.NewLeaderElector(cd.cfg)
		if err != nil {
			cd.w.t.Error(err)
			return
		}
		el.Run(ctx)
	}
}

// lead is OnStartedLeading: write every object with ctx's token until ctx
// ends, or until paused: then, once released, write late with the token.
func (cd *staleCand) lead(ctx context.Context) {
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
			w.write(ctx, tok, fmt.Sprintf("obj-%d", n%staleObjects))
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
			w.lateWrites(context.WithoutCancel(ctx), tok)
			close(done)
			<-ctx.Done()
			return
		}
		w.write(ctx, tok, fmt.Sprintf("obj-%d", n%staleObjects))
		time.Sleep(5 * time.Millisecond)
	}
}

// write reads name and writes it with tok, creating it when missing, and
// records an accepted write.
func (w *staleWorld) write(ctx context.Context, tok fence.Token, name string) {
	cm := &corev1.ConfigMap{}
	err := w.c.Get(ctx, client.ObjectKey{Namespace: "fenced", Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fenced", Name: name}}
		cm.Data = map[string]string{"by": tok.String()}
		err = w.c.Create(ctx, cm)
	case err == nil:
		cm.Data = map[string]string{"by": tok.String()}
		err = w.c.Update(ctx, cm)
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

// lateWrites writes every object with the old token after a fresh read
// (an Update) and as a merge patch; each must be refused as stale.
func (w *staleWorld) lateWrites(ctx context.Context, tok fence.Token) {
	for i := range staleObjects {
		name := fmt.Sprintf("obj-%d", i)
		cm := &corev1.ConfigMap{}
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: "fenced", Name: name}, cm); err != nil {
			w.t.Errorf("late read %s: %v", name, err)
			continue
		}
		orig := cm.DeepCopy()
		cm.Data = map[string]string{"by": "late " + tok.String()}
		for _, err := range []error{
			w.c.Update(ctx, cm.DeepCopy()),
			w.c.Patch(ctx, cm.DeepCopy(), client.MergeFrom(orig)),
		} {
			w.mu.Lock()
			if w.refused.IsZero() {
				w.refused = time.Now()
			}
			w.late = append(w.late, err)
			w.mu.Unlock()
			var r *fence.RefusedError
			if !errors.As(err, &r) || r.Outcome != fence.Stale || r.Token != tok {
				w.t.Errorf("late write of %s with %s: want a stale refusal, got %v", name, tok, err)
			}
		}
	}
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
	if len(w.late) != 2*staleObjects*failovers {
		w.t.Errorf("%d late writes, want %d", len(w.late), 2*staleObjects*failovers)
	}
	return accepted
}
