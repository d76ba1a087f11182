package fencelock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"github.com/fencekit/fencekit/lease"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

func newLock(t *testing.T, c *etcdtest.Cluster, identity string, opts ...fencelock.Option) *fencelock.Lock {
	t.Helper()
	l, err := fencelock.New(c.Client(t), "ctrl", identity, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func lead(t *testing.T, l *fencelock.Lock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: l.Identity()}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigRefusesDurations(t *testing.T) {
	c := etcdtest.Start(t)
	l := newLock(t, c, "a", fencelock.WithTTL(10*time.Second)) // margin 1 s
	cb := leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}}
	for _, tc := range []struct {
		name       string
		ld, rd, rp time.Duration
		change     []string
	}{
		// controller-runtime's and client-go's defaults need a 15 s TTL.
		{"defaults with 10 s TTL", 15 * time.Second, 10 * time.Second, 2 * time.Second, []string{"RenewDeadline", "RetryPeriod", "TTL", "LeaseDuration"}},
		{"renewals too slow", 10 * time.Second, 7 * time.Second, 2 * time.Second, []string{"RenewDeadline", "RetryPeriod", "TTL"}},
		{"lease longer than TTL", 11 * time.Second, 5 * time.Second, time.Second, []string{"LeaseDuration", "TTL"}},
		{"lease not above renew deadline", 5 * time.Second, 5 * time.Second, time.Second, []string{"LeaseDuration", "RenewDeadline"}},
		{"retry not below renew deadline", 10 * time.Second, 2 * time.Second, 2 * time.Second, []string{"RenewDeadline", "RetryPeriod"}},
		{"negative", -time.Second, 5 * time.Second, time.Second, []string{"LeaseDuration", "RenewDeadline", "RetryPeriod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := leaderelection.LeaderElectionConfig{LeaseDuration: tc.ld, RenewDeadline: tc.rd, RetryPeriod: tc.rp, Callbacks: cb}
			got, err := l.Config(cfg)
			var de *fencelock.DurationError
			if !errors.As(err, &de) || !errors.Is(err, fencelock.ErrDurations) {
				t.Fatalf("Config: %v, want a *DurationError", err)
			}
			for _, want := range tc.change {
				if !slices.Contains(de.Change, want) {
					t.Errorf("Change = %v, want %s in it (%v)", de.Change, want, err)
				}
			}
			if got.Lock != nil || got.ReleaseOnCancel {
				t.Errorf("Config changed the config it refused: %+v", got)
			}
		})
	}
	ld, rd, rp := l.Durations()
	if ld != 10*time.Second || rd+rp != 8*time.Second {
		t.Errorf("Durations() = %v, %v, %v", ld, rd, rp)
	}
	got, err := l.Config(leaderelection.LeaderElectionConfig{Callbacks: cb})
	if err != nil || got.LeaseDuration != ld || got.RenewDeadline != rd || got.RetryPeriod != rp || got.Lock != l || !got.ReleaseOnCancel || got.Name != "ctrl" {
		t.Errorf("Config with zero durations = %+v, %v", got, err)
	}
	l15 := newLock(t, c, "b", fencelock.WithTTL(15*time.Second))
	if err := l15.SetDurations(15*time.Second, 10*time.Second, 2*time.Second); err != nil {
		t.Errorf("client-go's defaults with a 15 s TTL: %v", err)
	}
	for _, cfg := range []leaderelection.LeaderElectionConfig{
		{Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: cb.OnStartedLeading}},
		{Callbacks: cb, Coordinated: true},
		{Callbacks: cb, Lock: l15},
	} {
		if _, err := l.Config(cfg); !errors.Is(err, fencelock.ErrConfig) {
			t.Errorf("Config(%+v): %v, want ErrConfig", cfg, err)
		}
	}
}

func TestGetReportsEtcdsLeader(t *testing.T) {
	c := etcdtest.Start(t)
	a, b := newLock(t, c, "pod-a"), newLock(t, c, "pod-b")
	ctx := context.Background()
	rec, raw, err := b.Get(ctx)
	if err != nil || rec.HolderIdentity != "" || len(raw) == 0 {
		t.Fatalf("Get with no leader = %+v, %q, %v", rec, raw, err)
	}
	lead(t, a)
	rec, _, err = b.Get(ctx)
	if err != nil || rec.HolderIdentity != "pod-a" || rec.LeaseDurationSeconds != -1 || rec.AcquireTime.IsZero() {
		t.Fatalf("Get = %+v, %v; want pod-a, lease duration -1, an acquire time", rec, err)
	}
	if got, want := b.Describe(), "etcd "+lease.DefaultPrefix+"ctrl"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if _, err := b.Fence(); !errors.Is(err, fencelock.ErrNotLeading) {
		t.Errorf("b.Fence(): %v, want ErrNotLeading", err)
	}
	if err := b.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "pod-a"}); !errors.Is(err, fencelock.ErrIdentity) {
		t.Errorf("b.Update for pod-a: %v, want ErrIdentity", err)
	}
	// Release: a resigns, b's campaign (queued in etcd) wins.
	won := make(chan error, 1)
	go func() {
		won <- b.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "pod-b"})
	}()
	time.Sleep(100 * time.Millisecond)
	if err := a.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	if rec, _, err := a.Get(ctx); err != nil || rec.HolderIdentity != "pod-b" {
		t.Errorf("after the release Get = %+v, %v", rec, err)
	}
}

func TestRecordEvent(t *testing.T) {
	c := etcdtest.Start(t)
	rec := record.NewFakeRecorder(1)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "pod-a"}}
	var logs strings.Builder
	l := newLock(t, c, "pod-a", fencelock.WithEventRecorder(rec, pod),
		fencelock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	l.RecordEvent("became leader")
	if got, want := <-rec.Events, "Normal LeaderElection pod-a became leader"; got != want {
		t.Errorf("event %q, want %q", got, want)
	}
	if !strings.Contains(logs.String(), `event="became leader"`) || !strings.Contains(logs.String(), "identity=pod-a") {
		t.Errorf("log: %s", logs.String())
	}
	if _, err := fencelock.New(c.Client(t), "ctrl", "pod-a", fencelock.WithEventRecorder(nil, pod)); err == nil {
		t.Error("New accepted a nil event recorder")
	}
	for _, id := range []string{"", "\xff", strings.Repeat("x", lease.MaxValueLen+1)} {
		if _, err := fencelock.New(c.Client(t), "ctrl", id); !errors.Is(err, fencelock.ErrIdentity) {
			t.Errorf("New with identity %q: %v, want ErrIdentity", id, err)
		}
	}
}

// A term taken away in etcd ends the leadership at once: the leader
// context is cancelled, Update fails without waiting for etcd, and Check
// fails.
func TestUpdateFailsAtOnceAfterLoss(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	l := newLock(t, c, "pod-a", fencelock.WithTTL(2*time.Second))
	lctx := l.Context(context.Background())
	if _, ok := fence.FromContext(lctx); ok {
		t.Error("the leader context carries a token before the Lock leads")
	}
	lead(t, l)
	tok, err := l.Fence()
	if got, ok := fence.FromContext(lctx); !ok || got != tok || err != nil {
		t.Errorf("leader context token %v, %v; Fence() = %v, %v", got, ok, tok, err)
	}
	if err := l.Check(nil); err != nil {
		t.Errorf("Check while leading: %v", err)
	}
	del := faults.DeleteHolder(cli, faults.LockPrefix(lease.DefaultPrefix, "ctrl"))
	if err := del.Inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader context was not cancelled after the record was deleted")
	}
	if cause := context.Cause(lctx); !errors.Is(cause, lease.ErrKeyDeleted) {
		t.Errorf("cause %v, want lease.ErrKeyDeleted", cause)
	}
	start := time.Now()
	err = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "pod-a"})
	if took := time.Since(start); !errors.Is(err, fencelock.ErrTermEnded) || took > 50*time.Millisecond {
		t.Errorf("Update after the loss: %v after %v, want ErrTermEnded at once", err, took)
	}
	if err := l.Check(nil); !errors.Is(err, fencelock.ErrTermEnded) {
		t.Errorf("Check after the loss: %v, want ErrTermEnded", err)
	}
	if _, err := l.Fence(); !errors.Is(err, fencelock.ErrNotLeading) {
		t.Errorf("Fence after the loss: %v", err)
	}
	if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{}); err != nil {
		t.Errorf("release after the loss: %v", err)
	}
}

// Check fails before the term's Done closes when renewals stop.
func TestCheckFailsBeforeTheTermEnds(t *testing.T) {
	c := etcdtest.Start(t)
	ps := c.Proxies(t)
	l, err := fencelock.New(c.ClientThrough(t, ps...), "ctrl", "pod-a",
		fencelock.WithTTL(2*time.Second), fencelock.WithHealthWindow(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lead(t, l)
	lctx := l.Context(context.Background())
	cut := faults.Partition(ps...)
	if err := cut.Inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cut.Heal(context.Background()) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := l.Check(nil)
		if errors.Is(err, fencelock.ErrExpiring) {
			if lctx.Err() != nil {
				t.Fatal("Check failed only after the term ended")
			}
			t.Logf("Check: %v", err)
			break
		}
		if err != nil {
			t.Fatalf("Check: %v before ErrExpiring", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("Check never failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-lctx.Done()
	if err := l.Check(nil); !errors.Is(err, fencelock.ErrTermEnded) {
		t.Errorf("Check after the term ended: %v", err)
	}
}
