package redisguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/redisguard"
)

// TestStoreSharedByReplicas: two guard.Guards (two replicas of a
// service) on one Store prefix share marks: a write admitted by one
// raises the mark the other refuses older tokens against.
func TestStoreSharedByReplicas(t *testing.T) {
	ctx := context.Background()
	cli, id := testRedis(t)
	prefix := id + ":marks:"
	res := id + "-items"
	tgt := guard.Target{Resource: res, Lock: "orders"}
	replica := func() (*redisguard.Store, *guard.Guard) {
		s, err := redisguard.NewStore(cli, prefix)
		if err != nil {
			t.Fatal(err)
		}
		g, err := guard.New(s)
		if err != nil {
			t.Fatal(err)
		}
		return s, g
	}
	s1, r1 := replica()
	s2, r2 := replica()
	nop := func(context.Context) error { return nil }

	// Unclaimed: a Guard without a verifier cannot admit, and says why.
	if err := r1.Do(ctx, tgt, tok(5), nop); !errors.Is(err, redisguard.ErrUnclaimed) {
		t.Fatalf("Do on an unclaimed resource = %v, want ErrUnclaimed", err)
	}
	if _, err := s2.Mark(ctx, res); !errors.Is(err, fence.ErrNoMark) {
		t.Errorf("Mark of an unclaimed resource = %v, want ErrNoMark", err)
	}
	if err := s1.Claim(ctx, tok(5), res); err != nil {
		t.Fatal(err)
	}
	if err := r1.Do(ctx, tgt, tok(5), nop); err != nil {
		t.Fatalf("replica 1, token 5: %v", err)
	}
	if err := r2.Do(ctx, tgt, tok(7), nop); err != nil {
		t.Fatalf("replica 2, token 7: %v", err)
	}
	err := r1.Do(ctx, tgt, tok(5), nop)
	var rej *fence.RefusedError
	if !errors.As(err, &rej) || !errors.Is(err, fence.ErrStale) || rej.Mark != tok(7) {
		t.Errorf("replica 1, token 5 after 7 = %v, want stale against mark 7", err)
	}
	if err := r1.Do(ctx, guard.Target{Resource: res, Lock: "other"}, fence.Token{Lock: "other", Revision: 99}, nop); !errors.Is(err, fence.ErrWrongLock) {
		t.Errorf("another lock's token = %v, want ErrWrongLock", err)
	}
	if m, err := s1.Mark(ctx, res); err != nil || m != tok(7) {
		t.Errorf("Mark = %v, %v; want %v", m, err, tok(7))
	}
	if got, err := s2.Advance(ctx, res, tok(7)); err != nil || got != tok(7) {
		t.Errorf("Advance with the mark's token = %v, %v", got, err)
	}
	if got, err := s2.Advance(ctx, res, tok(6)); !errors.Is(err, fence.ErrStale) || got != tok(7) {
		t.Errorf("Advance with an older token = %v, %v; want the mark and ErrStale", got, err)
	}

	// The operator's reset, through guard.Guard.ResetMark.
	if err := r2.ResetMark(ctx, res, tok(6), tok(3)); !errors.Is(err, fence.ErrMarkChanged) {
		t.Errorf("reset from a wrong old mark = %v, want ErrMarkChanged", err)
	}
	if err := r2.ResetMark(ctx, res, tok(7), tok(3)); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if err := r1.Do(ctx, tgt, tok(3), nop); err != nil {
		t.Errorf("token 3 after the reset: %v", err)
	}
	if _, err := s1.Advance(ctx, "", tok(3)); !errors.Is(err, guard.ErrInvalidTarget) {
		t.Errorf("Advance of an empty resource = %v, want ErrInvalidTarget", err)
	}
	if _, err := s1.Advance(ctx, res, fence.Token{Lock: "orders"}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Advance with revision 0 = %v, want ErrInvalid", err)
	}
	if s1.Key(res) != prefix+"{"+res+"}" {
		t.Errorf("Key = %q", s1.Key(res))
	}
}

// TestStoreAndGuardShareMarks: a redisguard.Guard with the Store's prefix
// sees the marks the Store advanced, and the other way round, so an
// HTTP service and a worker writing Redis directly fence one resource.
func TestStoreAndGuardShareMarks(t *testing.T) {
	ctx := context.Background()
	cli, id := testRedis(t)
	prefix := id + ":marks:"
	res := id + "-items"
	s, err := redisguard.NewStore(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	g, err := redisguard.New(cli, redisguard.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, tok(10), res); err != nil {
		t.Fatal(err)
	}
	tgt := guard.Target{Resource: res, Lock: "orders"}
	if _, err := g.Set(ctx, tgt, tok(9), redisguard.Key(res, "v"), "x"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Guard write older than the Store's mark = %v, want ErrStale", err)
	}
	if _, err := g.Set(ctx, tgt, tok(11), redisguard.Key(res, "v"), "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, res, tok(10)); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Store advance older than the Guard's write = %v, want ErrStale", err)
	}
}
