package guard_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestNewClusterMarkAhead: marks kept from an earlier etcd cluster refuse
// the holder of a fresh cluster, whose revisions start again. With a
// verifier the refusal is the distinct ErrMarkAhead naming the recovery
// (HTTP 409 ProblemMarkAhead), logged at Error; ResetMark recovers, and
// afterwards a superseded holder is plain stale again. Without a verifier
// the stale error says what to do if the holder is current.
func TestNewClusterMarkAhead(t *testing.T) {
	t.Run("MemoryStore", func(t *testing.T) {
		testNewClusterMarkAhead(t, func(*clientv3.Client) guard.Store { return guard.NewMemoryStore() })
	})
	t.Run("etcdstore", func(t *testing.T) {
		// Marks in the old cluster, which the service keeps using.
		testNewClusterMarkAhead(t, func(old *clientv3.Client) guard.Store {
			s, err := etcdstore.New(old, "marks/")
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func testNewClusterMarkAhead(t *testing.T, newStore func(old *clientv3.Client) guard.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acquire := func(cli *clientv3.Client) (*lease.Client, *lease.Lease) {
		t.Helper()
		locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { locks.Close() })
		l, err := locks.Acquire(ctx, "items")
		if err != nil {
			t.Fatal(err)
		}
		return locks, l
	}
	// The old cluster: its revision has grown before the holder wrote.
	oldCli := etcdtest.Client(t, etcdtest.Start(t))
	store := newStore(oldCli) // outlives the old lock service, like sqlguard's tables
	for range 20 {
		if _, err := oldCli.Put(ctx, "filler", "x"); err != nil {
			t.Fatal(err)
		}
	}
	oldLocks, oldHolder := acquire(oldCli)
	g, err := guard.New(store, guard.WithVerifier(oldLocks.Verifier()))
	if err != nil {
		t.Fatal(err)
	}
	tgt := guard.Target{Resource: "item/1", Lock: "items"}
	nop := func(context.Context) error { return nil }
	if err := g.Do(ctx, tgt, oldHolder.Fence(), nop); err != nil {
		t.Fatal(err)
	}

	// The service moves to a new cluster and keeps its marks.
	newLocks, holder := acquire(etcdtest.Client(t, etcdtest.Start(t)))
	if holder.Fence().Revision >= oldHolder.Fence().Revision {
		t.Fatalf("new cluster's revision %d is not below the old one's %d", holder.Fence().Revision, oldHolder.Fence().Revision)
	}
	var logs testkit.LogBuffer
	g, err = guard.New(store, guard.WithVerifier(newLocks.Verifier()), guard.WithLogger(logs.Logger(slog.LevelInfo)))
	if err != nil {
		t.Fatal(err)
	}
	err = g.Do(ctx, tgt, holder.Fence(), nop)
	var ahead *fence.RefusedError
	if !errors.As(err, &ahead) || !errors.Is(err, fence.ErrMarkAhead) || ahead.Outcome != fence.MarkAhead || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("new cluster's holder against the old mark: %v, want *fence.RefusedError (mark_ahead) matching fence.ErrMarkAhead and fence.ErrStale", err)
	}
	if ahead.Mark != oldHolder.Fence() || ahead.Token != holder.Fence() || ahead.Resource != tgt.Resource {
		t.Errorf("mark-ahead refusal = %+v", ahead)
	}
	for _, s := range []string{"new etcd cluster", "Guard.ResetMark", oldHolder.Fence().String()} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	recs := logs.Records(t)
	if len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["outcome"] != "mark_ahead" || !strings.Contains(recs[0]["msg"].(string), "ResetMark") {
		t.Errorf("log records %v, want one at ERROR naming ResetMark", recs)
	}

	// Over HTTP: 409 with its own problem type.
	s := newItemServer(t, g)
	status, p := send(t, http.MethodPut, s.srv.URL+"/items/1", "x", holder.Fence().String())
	if status != http.StatusConflict || p.Type != guard.ProblemType(fence.MarkAhead) || p.Mark != oldHolder.Fence().String() {
		t.Errorf("HTTP: %d %+v, want 409 %s with the mark", status, p, guard.ProblemType(fence.MarkAhead))
	}

	// The recovery: reset the mark to the new holder's token.
	if err := g.ResetMark(ctx, tgt.Resource, oldHolder.Fence(), holder.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, tgt, holder.Fence(), nop); err != nil {
		t.Fatalf("holder after the reset: %v", err)
	}
	// A holder superseded in the new cluster is plain stale, confirmed
	// by the verifier: no hint about the mark.
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := newLocks.Acquire(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, tgt, next.Fence(), nop); err != nil {
		t.Fatal(err)
	}
	err = g.Do(ctx, tgt, holder.Fence(), nop)
	if !errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrMarkAhead) || strings.Contains(err.Error(), "ResetMark") {
		t.Errorf("superseded holder: %v, want plain stale", err)
	}

	// Without a verifier a guard cannot tell the two apart: the stale
	// error names the recovery for the case the holder is current.
	plain := newGuard(t)
	plain.Do(ctx, tgt, tok("items", 40), nop)
	err = plain.Do(ctx, tgt, tok("items", 3), nop)
	if !errors.As(err, new(*fence.RefusedError)) || errors.Is(err, fence.ErrMarkAhead) ||
		!strings.Contains(err.Error(), "new etcd cluster") || !strings.Contains(err.Error(), "Guard.ResetMark") {
		t.Errorf("stale without a verifier: %v, want the hint naming a new cluster and ResetMark", err)
	}
}
