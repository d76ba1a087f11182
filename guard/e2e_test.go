package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
)

// TestEndToEndPausedHolder: holder A's link to etcd pauses past its TTL;
// A's lease ends, B acquires the lock and writes through the HTTP guard;
// A wakes and its write with its old token is refused with 409, and B's
// data stays.
func TestEndToEndPausedHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.Start(t)

	// The fenced service keeps its marks in etcd over its own client.
	store, err := etcdstore.New(etcdtest.Client(t, c), "/fencekit-test/marks/")
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(store)
	if err != nil {
		t.Fatal(err)
	}
	svc := newItemServer(t, g)
	tr := &guard.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	write := func(l *lease.Lease, body string) (int, guard.Problem) {
		t.Helper()
		status, b := svc.putWithToken(t, ctx, client, l.Fence(), "/items/report", body)
		var p guard.Problem
		if status >= 400 {
			if err := json.Unmarshal(b, &p); err != nil {
				t.Errorf("decode problem: %v", err)
			}
		}
		return status, p
	}

	// A reaches etcd through a proxy that can pause; B directly.
	proxy, err := faultproxy.New(strings.TrimPrefix(c.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	locksA, err := lease.New(etcdtest.Client(t, c, proxy.URL()), lease.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		proxy.Resume()
		locksA.Close()
	}()
	locksB, err := lease.New(etcdtest.Client(t, c), lease.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer locksB.Close()

	a, err := locksA.Acquire(ctx, "items")
	if err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	if status, p := write(a, "draft by A"); status != http.StatusNoContent {
		t.Fatalf("A's write while holding: %d %+v", status, p)
	}

	// A's process stalls: nothing reaches etcd. Its lease must end.
	proxy.Pause()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("A's lease did not end while its link to etcd was paused past the TTL")
	}
	if err := a.Err(); !errors.Is(err, lease.ErrLost) {
		t.Errorf("A's lease ended with %v, want ErrLost", err)
	}

	b, err := locksB.Acquire(ctx, "items")
	if err != nil {
		t.Fatalf("B acquire: %v", err)
	}
	defer b.Release(context.Background())
	if b.Fence().Revision <= a.Fence().Revision {
		t.Fatalf("B's token %v is not newer than A's %v", b.Fence(), a.Fence())
	}
	if status, p := write(b, "final by B"); status != http.StatusNoContent {
		t.Fatalf("B's write: %d %+v", status, p)
	}

	// A wakes up and, unaware, writes with its old token.
	proxy.Resume()
	status, p := write(a, "late by A")
	if status != guard.HTTPStatus(fence.Stale) || p.Type != guard.ProblemType(fence.Stale) {
		t.Errorf("A's late write: status %d, problem %+v; want %d %s", status, p, guard.HTTPStatus(fence.Stale), guard.ProblemType(fence.Stale))
	}
	if p.Token != a.Fence().String() || p.Mark != b.Fence().String() || p.Resource != "item/report" {
		t.Errorf("problem %+v, want token %s, mark %s, resource item/report", p, a.Fence(), b.Fence())
	}
	if got := svc.item("report"); got != "final by B" {
		t.Errorf("item = %q, want B's data intact", got)
	}
	want := []fence.Token{a.Fence(), b.Fence()}
	if got := svc.appliedTokens(); !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v", got, want)
	}
}
