package objguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/storytest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/objguard"
)

// TestStory is the quick start's story against a real S3 server and a
// real etcd: A holds the lock and writes the object; A's link to etcd is
// cut past its TTL and its lease ends; B acquires and writes; A wakes and
// its late PUT and DELETE are refused; the object holds B's bytes. A and
// B are separate programs (a Guard each), verifying tokens with a
// lease.Verifier; A's Guard remembers the version it wrote, so its late
// PUT is first refused by the store (412) and then decided on a fresh
// read.
func TestStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := startStore(t)
	c := etcdtest.Start(t)
	verifier, err := lease.NewVerifier(etcdtest.Client(t, c), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	gA := s.newGuard(t, objguard.WithVerifier(verifier))
	gB := s.newGuard(t, objguard.WithVerifier(verifier))
	const key = "reports/daily.json"

	st := storytest.Start(ctx, t, c, "report")
	a := st.A
	if _, err := gA.Put(ctx, key, a.Fence(), []byte("draft by A")); err != nil {
		t.Fatalf("A's write while holding: %v", err)
	}

	st.Depose(ctx)
	b := st.B
	if _, err := gB.Put(ctx, key, b.Fence(), []byte("final by B")); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	st.Wake()
	_, err = gA.Put(ctx, key, a.Fence(), []byte("late by A"))
	var stale *fence.RefusedError
	if !errors.As(err, &stale) || stale.Outcome != fence.Stale || stale.Mark != b.Fence() || stale.Resource != key {
		t.Errorf("A's late PUT = %v, want a stale *fence.RefusedError with B's token as the mark", err)
	}
	if err := gA.Delete(ctx, key, a.Fence()); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's late DELETE = %v, want fence.ErrStale", err)
	}
	if err := gA.Purge(ctx, key, a.Fence()); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's late Purge = %v, want fence.ErrStale", err)
	}
	if got := s.read(t, key); got != "final by B" {
		t.Errorf("object holds %q, want B's bytes", got)
	}
	o, err := gB.Head(ctx, key)
	if err != nil || o.Mark != b.Fence() || o.Deleted {
		t.Errorf("Head = %+v, %v; want B's mark, not deleted", o, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
}
