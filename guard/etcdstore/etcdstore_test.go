package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
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
		if !errors.Is(err, fence.ErrMarkChanged) {
			t.Errorf("reset from %v: %v, want fence.ErrMarkChanged", old, err)
		}
		if mark, err := g.Mark(ctx, "r"); err != nil || mark != poison {
			t.Errorf("reset from %v: mark %v, %v; want it unchanged at %v", old, mark, err, poison)
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
	// A resource without a mark reads as fence.ErrNoMark, and is reset
	// from the zero Token.
	if m, err := store.Mark(ctx, "fresh"); !errors.Is(err, fence.ErrNoMark) || !m.IsZero() {
		t.Errorf("Mark of a resource without a mark = %v, %v; want fence.ErrNoMark", m, err)
	}
	if err := store.ResetMark(ctx, "fresh", fence.Token{}, real); err != nil {
		t.Errorf("reset of a fresh resource: %v", err)
	}
	if err := store.ResetMark(ctx, "fresh", fence.Token{}, real); !errors.Is(err, fence.ErrMarkChanged) {
		t.Errorf("second reset from zero: %v, want ErrMarkChanged", err)
	}
}

// hookedVerifier is a lease.Verifier that runs after once, right after
// its first check: the holder can lose the lock between the check and
// the mark's advance.
type hookedVerifier struct {
	v     *lease.Verifier
	after func()
	once  sync.Once
	calls atomic.Int64
}

func (h *hookedVerifier) Verify(ctx context.Context, t fence.Token) error {
	h.calls.Add(1)
	err := h.v.Verify(ctx, t)
	h.once.Do(h.after)
	return err
}

// conditionVerifier adds lease.Verifier's Condition to hookedVerifier.
type conditionVerifier struct{ *hookedVerifier }

func (c conditionVerifier) Condition(ctx context.Context, t fence.Token) (clientv3.Cmp, uint64, error) {
	c.calls.Add(1)
	cmp, id, err := c.v.Condition(ctx, t)
	c.once.Do(c.after)
	return cmp, id, err
}

// TestAdvanceVerifiedIsAtomic: with a lease.Verifier of the same cluster,
// a holder that loses the lock between the check and the advance does
// not raise the mark; with a verifier that can only Verify, it does (the
// window guard/doc.go describes).
func TestAdvanceVerifiedIsAtomic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	cli := etcdtest.Client(t, c)
	locks, err := lease.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	store, err := etcdstore.New(cli, "/marks/")
	if err != nil {
		t.Fatal(err)
	}
	for _, withCondition := range []bool{true, false} {
		name := fmt.Sprintf("orders-%v", withCondition)
		holder, err := locks.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		h := &hookedVerifier{v: locks.Verifier(), after: func() {
			if err := holder.Release(ctx); err != nil {
				t.Error(err)
			}
		}}
		var v guard.Verifier = h
		if withCondition {
			v = conditionVerifier{h}
		}
		g, err := guard.New(store, guard.WithVerifier(v))
		if err != nil {
			t.Fatal(err)
		}
		err = g.Do(ctx, guard.Target{Resource: name, Lock: name}, holder.Fence(), func(context.Context) error { return nil })
		mark, merr := store.Mark(ctx, name)
		if merr != nil && !errors.Is(merr, fence.ErrNoMark) {
			t.Fatal(merr)
		}
		if withCondition {
			if !errors.Is(err, fence.ErrUnverified) || !errors.Is(merr, fence.ErrNoMark) {
				t.Errorf("holder released between check and advance: %v, mark %v; want ErrUnverified and no mark", err, mark)
			}
		} else if err != nil || mark != holder.Fence() {
			t.Errorf("without Condition: %v, mark %v; want the window: accepted, mark %v", err, mark, holder.Fence())
		}
	}
}

// TestVerifiedGuardOnEtcdStore: forged tokens leave the mark in etcd
// unchanged; the holder's are accepted, the repeated one without a check;
// a stale token costs one check (is the mark ahead of the lock service?).
func TestVerifiedGuardOnEtcdStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	cli := etcdtest.Client(t, c)
	locks, err := lease.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	store, err := etcdstore.New(cli, "/marks/")
	if err != nil {
		t.Fatal(err)
	}
	first, err := locks.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	holder, err := locks.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	v := &hookedVerifier{v: locks.Verifier(), after: func() {}}
	g, err := guard.New(store, guard.WithVerifier(conditionVerifier{v}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := guard.Target{Resource: "r", Lock: "orders"}
	noop := func(context.Context) error { return nil }
	for _, forged := range []fence.Token{tok("orders", 1<<40), first.Fence(), tok("orders", holder.Fence().Revision+1)} {
		if err := g.Do(ctx, tgt, forged, noop); !errors.Is(err, fence.ErrUnverified) {
			t.Errorf("forged %v: %v, want ErrUnverified", forged, err)
		}
		if mark, _ := store.Mark(ctx, "r"); !mark.IsZero() {
			t.Fatalf("mark after forged %v: %v", forged, mark)
		}
	}
	for range 2 {
		if err := g.Do(ctx, tgt, holder.Fence(), noop); err != nil {
			t.Errorf("holder: %v", err)
		}
	}
	if err := g.Do(ctx, tgt, first.Fence(), noop); !errors.Is(err, fence.ErrStale) {
		t.Errorf("released token under the mark: %v, want stale", err)
	}
	if mark, _ := store.Mark(ctx, "r"); mark != holder.Fence() {
		t.Errorf("mark %v, want the holder's", mark)
	}
	if n := v.calls.Load(); n != 5 {
		t.Errorf("verifier called %d times, want 5: once per forgery, once for the holder and once for the stale token", n)
	}
}
