package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/internal/etcdtest"
)

func tok(lock string, rev int64) fence.Token { return fence.Token{Lock: lock, Revision: rev} }

func TestNewValidates(t *testing.T) {
	if _, err := etcdstore.New(nil, "/p/"); err == nil {
		t.Error("New(nil client): got nil error")
	}
	c := etcdtest.Start(t)
	if _, err := etcdstore.New(etcdtest.Client(t, c), ""); err == nil {
		t.Error("New with empty prefix: got nil error")
	}
}

// TestResetMark: a poisoned mark in etcd is reset only from its exact
// value, through a Guard of another replica too, and the real holder
// writes again.
func TestResetMark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	cli := etcdtest.Client(t, c)
	store, err := etcdstore.New(cli, "/marks/")
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(store)
	if err != nil {
		t.Fatal(err)
	}
	real, poison := tok("orders", 7), tok("orders", 1<<40)
	if _, err := store.Advance(ctx, "r", poison); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Advance(ctx, "r", real); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("real holder on a poisoned mark: %v, want stale", err)
	}
	for _, old := range []fence.Token{{}, real, tok("orders", 1<<40+1)} {
		err := g.ResetMark(ctx, "r", old, real)
		var mc *guard.MarkChangedError
		if !errors.As(err, &mc) || mc.Mark != poison || !errors.Is(err, guard.ErrMarkChanged) {
			t.Errorf("reset from %v: %v, want *MarkChangedError with mark %v", old, err, poison)
		}
	}
	if err := g.ResetMark(ctx, "r", poison, tok("payments", 7)); !errors.Is(err, fence.ErrWrongLock) {
		t.Errorf("reset to another lock: %v, want ErrWrongLock", err)
	}
	if err := g.ResetMark(ctx, "r", poison, real); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if mark, err := store.Mark(ctx, "r"); err != nil || mark != real {
		t.Errorf("mark after reset: %v, %v", mark, err)
	}
	if _, err := store.Advance(ctx, "r", real); err != nil {
		t.Errorf("real holder after reset: %v", err)
	}
	// A resource without a mark is reset from the zero Token.
	if err := store.ResetMark(ctx, "fresh", fence.Token{}, real); err != nil {
		t.Errorf("reset of a fresh resource: %v", err)
	}
	if err := store.ResetMark(ctx, "fresh", fence.Token{}, real); !errors.Is(err, guard.ErrMarkChanged) {
		t.Errorf("second reset from zero: %v, want ErrMarkChanged", err)
	}
}
