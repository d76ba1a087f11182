package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// verifierClient is a Client closed on cleanup.
func verifierClient(t *testing.T, cli *clientv3.Client, opts ...lease.Option) *lease.Client {
	t.Helper()
	c, err := lease.New(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestVerifier: only the current holder's revision of the named lock is
// genuine; every other token is a *fence.RefusedError of outcome unverified, and a failure to read
// etcd is neither.
func TestVerifier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	cli := etcdtest.Client(t, c)
	locks := verifierClient(t, cli, lease.WithPrefix("verify-test"))
	v := locks.Verifier()

	first, err := locks.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, first.Fence()); err != nil {
		t.Fatalf("holder's token: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, first.Fence()); !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("released, no holder: %v, want ErrUnverified", err)
	}
	holder, err := locks.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	other, err := locks.Acquire(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	// A waiter's record.
	waiters := verifierClient(t, etcdtest.Client(t, c), lease.WithPrefix("verify-test/"))
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); waiters.Acquire(wctx, "orders") }()
	defer func() { wcancel(); wg.Wait() }()
	var waiter int64
	for waiter == 0 {
		resp, err := cli.Get(ctx, "verify-test/orders/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 2 {
			waiter = resp.Kvs[1].CreateRevision
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Something that is not a lock record, written by hand at the head of
	// a queue.
	put, err := cli.Put(ctx, "verify-test/forged/x", "not a record")
	if err != nil {
		t.Fatal(err)
	}

	if err := v.Verify(ctx, holder.Fence()); err != nil {
		t.Errorf("holder's token: %v", err)
	}
	// Same records through NewVerifier, with and without the trailing "/".
	for _, p := range []string{"verify-test", "verify-test/"} {
		nv, err := lease.NewVerifier(cli, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := nv.Verify(ctx, holder.Fence()); err != nil {
			t.Errorf("NewVerifier(%q): holder's token: %v", p, err)
		}
	}
	for name, tk := range map[string]fence.Token{
		"released":            first.Fence(),
		"waiter":              {Lock: "orders", Revision: waiter},
		"other lock's holder": {Lock: "orders", Revision: other.Fence().Revision},
		"far future":          {Lock: "orders", Revision: 1 << 40},
		"max revision":        {Lock: "orders", Revision: 1<<63 - 1},
		"zero":                {Lock: "orders"},
		"negative":            {Lock: "orders", Revision: -1},
		"no such lock":        {Lock: "nobody", Revision: holder.Fence().Revision},
		"lock with a slash":   {Lock: "orders/x", Revision: holder.Fence().Revision},
		"not a lock record":   {Lock: "forged", Revision: put.Header.Revision},
	} {
		err := v.Verify(ctx, tk)
		var ue *fence.RefusedError
		if !errors.As(err, &ue) || !errors.Is(err, fence.ErrUnverified) || ue.Token != tk || ue.Outcome != fence.Unverified {
			t.Errorf("%s %v: %v, want *fence.RefusedError (unverified)", name, tk, err)
		}
	}
	if err := v.Verify(ctx, fence.Token{Lock: "orders"}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("revision 0: %v, want it to match fence.ErrInvalid too", err)
	}

	// Another cluster's holder of the same lock, at another revision.
	c2 := etcdtest.Start(t)
	cli2 := etcdtest.Client(t, c2)
	for {
		resp, err := cli2.Put(ctx, "filler", "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision > put.Header.Revision+3 {
			break
		}
	}
	elsewhere, err := verifierClient(t, cli2, lease.WithPrefix("verify-test")).Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, elsewhere.Fence()); !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("other cluster's holder: %v, want ErrUnverified", err)
	}

	// etcd unreachable, here: the context ends first.
	dead, dcancel := context.WithCancel(ctx)
	dcancel()
	if err := v.Verify(dead, holder.Fence()); err == nil || errors.Is(err, fence.ErrUnverified) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled and not ErrUnverified", err)
	}
}

func TestNewVerifierValidates(t *testing.T) {
	if _, err := lease.NewVerifier(nil, lease.DefaultPrefix); err == nil {
		t.Error("nil client: nil error")
	}
	c := etcdtest.Start(t)
	for _, p := range []string{"", "/"} {
		if _, err := lease.NewVerifier(etcdtest.Client(t, c), p); err == nil {
			t.Errorf("prefix %q: nil error", p)
		}
	}
}

// TestVerifierCondition: the condition holds in a Txn while the holder
// holds the lock, and fails once it released, even when the same session
// acquires the lock again (same record key, new revision).
func TestVerifierCondition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	cli := etcdtest.Client(t, c)
	locks := verifierClient(t, cli)
	v := locks.Verifier()
	holder, err := locks.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	cmp, id, err := v.Condition(ctx, holder.Fence())
	if err != nil {
		t.Fatal(err)
	}
	status, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if id != status.Header.ClusterId {
		t.Errorf("cluster id %x, want %x", id, status.Header.ClusterId)
	}
	holds := func() bool {
		t.Helper()
		resp, err := cli.Txn(ctx).If(cmp).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	if !holds() {
		t.Error("condition fails while the holder holds the lock")
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := locks.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if holds() {
		t.Errorf("condition of %v holds after release and a new acquisition %v", holder.Fence(), again.Fence())
	}
	if _, _, err := v.Condition(ctx, holder.Fence()); !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("Condition of a released token: %v, want ErrUnverified", err)
	}
}
