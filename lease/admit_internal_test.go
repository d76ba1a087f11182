package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease/internal/record"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A blocker's delete can reach a waiter before an earlier delete of the
// waiter's own record (each key has its own watch). A waiter admitted by
// such an event reads its record as of that event's revision before it
// holds: these cases are what that read decides, on a real etcd.
func TestAdmissionConfirmsOwnRecordAtTheAdmittingRevision(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const dir = "confirm/lock/"
	put := func(key, val string) int64 {
		t.Helper()
		resp, err := cli.Put(ctx, key, val)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	del := func(key string) int64 {
		t.Helper()
		resp, err := cli.Delete(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	newWaiter := func(key, tok string, myRev, readAt int64) *waiter {
		w := &waiter{key: key, dir: dir, owner: tok, wakec: make(chan struct{}, 1)}
		w.fin.Init()
		w.setMyRev(myRev)
		w.setBlockers(map[string]int64{dir + "head": 1}, 1, readAt)
		return w
	}

	t.Run("record deleted before the blocker", func(t *testing.T) {
		mine := put(dir+"a", record.EncodeValue("tok-a", 1))
		gone := del(dir + "a")
		blockerGone := put(dir+"other", "x") // any later revision
		w := newWaiter(dir+"a", "tok-a", mine, mine)
		w.onDelete(dir+"head", blockerGone) // arrives first
		if !w.admitted() || w.unconfirmed() != blockerGone {
			t.Fatalf("admitted %v unconfirmed %d; want admitted, unconfirmed at %d", w.admitted(), w.unconfirmed(), blockerGone)
		}
		if err := (&member{c: c, w: w}).confirmOwn(ctx, blockerGone); !errors.Is(err, ErrKeyDeleted) {
			t.Fatalf("confirmOwn = %v; want ErrKeyDeleted (deleted at %d, before %d)", err, gone, blockerGone)
		}
	})
	t.Run("record deleted after the blocker", func(t *testing.T) {
		mine := put(dir+"b", record.EncodeValue("tok-b", 1))
		blockerGone := put(dir+"other", "y")
		del(dir + "b")
		w := newWaiter(dir+"b", "tok-b", mine, mine)
		w.onDelete(dir+"head", blockerGone)
		if err := (&member{c: c, w: w}).confirmOwn(ctx, blockerGone); err != nil {
			t.Fatalf("confirmOwn = %v; want nil: the record was there when the blocker went", err)
		}
	})
	t.Run("record overwritten", func(t *testing.T) {
		mine := put(dir+"c", record.EncodeValue("tok-c", 1))
		put(dir+"c", record.EncodeValue("someone-else", 1))
		blockerGone := put(dir+"other", "z")
		w := newWaiter(dir+"c", "tok-c", mine, mine)
		w.onDelete(dir+"head", blockerGone)
		if err := (&member{c: c, w: w}).confirmOwn(ctx, blockerGone); !errors.Is(err, ErrKeyOverwritten) {
			t.Fatalf("confirmOwn = %v; want ErrKeyOverwritten", err)
		}
	})
	t.Run("admitting revision compacted", func(t *testing.T) {
		mine := put(dir+"d", record.EncodeValue("tok-d", 1))
		blockerGone := put(dir+"other", "w")
		now := put(dir+"other", "v")
		if _, err := cli.Compact(ctx, now, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		w := newWaiter(dir+"d", "tok-d", mine, mine)
		w.onDelete(dir+"head", blockerGone)
		if err := (&member{c: c, w: w}).confirmOwn(ctx, blockerGone); err != nil {
			t.Fatalf("confirmOwn = %v; want nil from a read of the present", err)
		}
		del(dir + "d")
		w = newWaiter(dir+"d", "tok-d", mine, mine)
		w.onDelete(dir+"head", blockerGone)
		if err := (&member{c: c, w: w}).confirmOwn(ctx, blockerGone); !errors.Is(err, ErrKeyDeleted) {
			t.Fatalf("confirmOwn = %v; want ErrKeyDeleted from a read of the present", err)
		}
	})
	t.Run("admitted by the read that found the record", func(t *testing.T) {
		w := &waiter{key: dir + "e", dir: dir, owner: "tok-e", wakec: make(chan struct{}, 1)}
		w.fin.Init()
		w.setMyRev(10)
		w.reading()
		w.onDelete(dir+"head", 12) // seen while reading at 15
		if !w.setBlockers(map[string]int64{dir + "head": 1}, 1, 15) {
			t.Fatal("not admitted")
		}
		if got := w.unconfirmed(); got != 0 {
			t.Fatalf("unconfirmed = %d; want 0: the read at 15 found the record", got)
		}
		w.reading()
		w.onDelete(dir+"head2", 18) // a delete after the read's revision
		if !w.setBlockers(map[string]int64{dir + "head2": 1}, 1, 16) {
			t.Fatal("not admitted")
		}
		if got := w.unconfirmed(); got != 18 {
			t.Fatalf("unconfirmed = %d; want 18, the delete seen past the read", got)
		}
	})
}

// The same race end to end: the waiter's own watch is held back (as a
// watch whose events are still on their way would be) while its record is
// deleted and then the holder ahead of it releases. The blocker's delete
// arrives alone; the waiter must not hold a lock whose record is gone.
func TestWaiterWhoseOwnDeleteIsLateIsNotAdmitted(t *testing.T) {
	ctx, cli, h, c, res := queueBehindHolder(t, "late")
	w, own := waitingBehind(t, c)
	c.recs.watches.Halt(own) // its events stop here
	if _, err := cli.Delete(ctx, w.key); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.err == nil {
			r.l.Release(ctx)
			t.Fatal("Acquire returned a lease whose record was deleted before the holder ahead released")
		}
		if !errors.Is(r.err, ErrKeyDeleted) {
			t.Fatalf("Acquire = %v; want ErrKeyDeleted", r.err)
		}
	case <-ctx.Done():
		t.Fatal("Acquire did not return")
	}
}

// acquired is what an Acquire returned.
type acquired struct {
	l   *Lease
	err error
}

// queueBehindHolder starts a cluster, has one Client acquire name (h) and
// another (c) wait for it in the background, whose Acquire's result res
// delivers. Everything stops on cleanup.
func queueBehindHolder(t *testing.T, name string) (ctx context.Context, cli *clientv3.Client, h *Lease, c *Client, res <-chan acquired) {
	t.Helper()
	cl := etcdtest.Start(t)
	cli = etcdtest.Client(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	holder, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	if h, err = holder.Acquire(ctx, name); err != nil {
		t.Fatal(err)
	}
	if c, err = New(cli); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, name)
		ch <- acquired{l, err}
	}()
	return ctx, cli, h, c, ch
}

// waitingBehind waits until c's one waiter watches the record it queues
// behind, and returns it and the watch of its own record.
func waitingBehind(t *testing.T, c *Client) (*waiter, *keyWatch) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.recs.mu.Lock()
		var w *waiter
		for _, x := range c.recs.waiters {
			w = x
		}
		var block, own *keyWatch
		if w != nil {
			block, own = w.block, w.own
		}
		c.recs.mu.Unlock()
		if block != nil && own != nil {
			select {
			case <-c.recs.watches.Created(block):
				return w, own
			default:
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no waiter watching its blocker")
	return nil, nil
}

// A request to release that reaches a Client while its record heads the
// queue but the acquisition is not yet a lease is kept by the waiter and
// passed on when it becomes one.
func TestAskWhileBeingAdmittedIsKept(t *testing.T) {
	ctx, _, h, c, res := queueBehindHolder(t, "asked-early")
	w, _ := waitingBehind(t, c)
	w.mu.Lock()
	rev := w.myRev
	w.mu.Unlock()
	c.recs.ask(w.key, rev, 0)   // as if the request came right before admission
	c.recs.ask(w.key, rev-1, 0) // a late request for an earlier record of the key
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	l := r.l
	defer l.Release(ctx)
	select {
	case <-l.ReleaseRequested():
	default:
		t.Fatal("the request that reached the waiter was lost at its admission")
	}
}
