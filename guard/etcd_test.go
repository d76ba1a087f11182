package guard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const markPrefix = "/fencekit-test/marks/"

// replica is one instance of a service: its own etcd client, store and
// Guard, sharing marks with the other replicas through etcd.
type replica struct {
	cli   *clientv3.Client
	store *etcdstore.Store
	g     *guard.Guard
}

func newReplicas(t *testing.T, n int) []replica {
	t.Helper()
	c := etcdtest.Start(t)
	rs := make([]replica, n)
	for i := range rs {
		cli := etcdtest.Client(t, c)
		store, err := etcdstore.New(cli, markPrefix)
		if err != nil {
			t.Fatal(err)
		}
		g, err := guard.New(store)
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = replica{cli: cli, store: store, g: g}
	}
	return rs
}

func TestNewEtcdStoreValidates(t *testing.T) {
	if _, err := etcdstore.New(nil, "/p/"); err == nil {
		t.Error("NewEtcdStore(nil client): got nil error")
	}
	c := etcdtest.Start(t)
	if _, err := etcdstore.New(etcdtest.Client(t, c), ""); err == nil {
		t.Error("NewEtcdStore with empty prefix: got nil error")
	}
}

// TestEtcdStoreTwoReplicas: two Guards sharing marks in etcd refuse what
// the other has superseded.
func TestEtcdStoreTwoReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := newReplicas(t, 2)
	a, b := rs[0], rs[1]
	tgt := guard.Target{Resource: "orders/1", Lock: "orders"}
	var applied []string
	writeAs := func(name string) func(context.Context) error {
		return func(context.Context) error { applied = append(applied, name); return nil }
	}

	if err := a.g.Do(ctx, tgt, tok("orders", 5), writeAs("a5")); err != nil {
		t.Fatalf("A with 5: %v", err)
	}
	err := b.g.Do(ctx, tgt, tok("orders", 3), writeAs("b3"))
	var rej *fence.RefusedError
	if !errors.As(err, &rej) || !errors.Is(err, fence.ErrStale) || rej.Mark != tok("orders", 5) {
		t.Errorf("B with 3 after A's 5: %v, want stale with mark 5", err)
	}
	if err := b.g.Do(ctx, tgt, tok("orders", 7), writeAs("b7")); err != nil {
		t.Fatalf("B with 7: %v", err)
	}
	if err := a.g.Do(ctx, tgt, tok("orders", 5), writeAs("a5-again")); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A with 5 after B's 7: %v, want stale", err)
	}
	if err := a.g.Do(ctx, tgt, tok("orders", 7), writeAs("a7")); err != nil {
		t.Errorf("A with equal 7: %v", err)
	}
	if err := a.g.Do(ctx, tgt, tok("payments", 1000), writeAs("wrong")); !errors.Is(err, fence.ErrWrongLock) {
		t.Errorf("wrong lock, higher revision: %v, want ErrWrongLock", err)
	}
	// The mark itself is bound to its lock: a store asked directly with
	// another lock's token refuses it too.
	if mark, err := b.store.Advance(ctx, tgt.Resource, tok("payments", 1000)); !errors.Is(err, fence.ErrWrongLock) || mark != tok("orders", 7) {
		t.Errorf("store Advance with another lock: %v, %v; want ErrWrongLock and mark 7", mark, err)
	}
	if err := b.g.Do(ctx, tgt, tok("orders", 0), writeAs("zero")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("revision 0: %v, want ErrMalformed", err)
	}
	if want := []string{"a5", "b7", "a7"}; !slices.Equal(applied, want) {
		t.Errorf("applied %v, want %v", applied, want)
	}

	resp, err := a.cli.Get(ctx, a.store.Key(tgt.Resource))
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "7:orders" {
		t.Errorf("etcd holds %v (%v), want 7:orders", resp, err)
	}
	for _, r := range rs {
		if mark, err := r.g.Mark(ctx, tgt.Resource); err != nil || mark != tok("orders", 7) {
			t.Errorf("Mark = %v, %v; want 7:orders", mark, err)
		}
	}

	// Claim on B shuts out A's older holder on every claimed resource.
	if err := b.g.Claim(ctx, tok("orders", 9), "orders/1", "orders/2"); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	for _, r := range []string{"orders/1", "orders/2"} {
		err := a.g.Do(ctx, guard.Target{Resource: r, Lock: "orders"}, tok("orders", 8), writeAs("a8"))
		if !errors.Is(err, fence.ErrStale) {
			t.Errorf("A with 8 on %s after B claimed 9: %v, want stale", r, err)
		}
	}
}

// TestEtcdStoreConcurrentAdvance races Advance from two replicas and
// checks, from etcd's own history of the mark key, that the mark only
// ever rose, and that every answer was consistent.
func TestEtcdStoreConcurrentAdvance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := newReplicas(t, 2)
	start, err := rs[0].cli.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	const resource = "hot"
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		highest  int64
		accepted int
		counter  atomic.Int64
	)
	for i := range 8 {
		r := rs[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for range 20 {
				// Rising with jitter: many newer, equal and stale tokens.
				rev := max(counter.Add(1)+int64(rng.IntN(7))-3, 1)
				mark, err := r.store.Advance(ctx, resource, tok("l", rev))
				switch {
				case err == nil:
					if mark.Revision < rev {
						t.Errorf("accepted %d but mark is %v", rev, mark)
					}
					mu.Lock()
					accepted++
					highest = max(highest, rev)
					mu.Unlock()
				case errors.Is(err, fence.ErrStale):
					if mark.Revision <= rev {
						t.Errorf("refused %d as stale with mark %v", rev, mark)
					}
				default:
					t.Errorf("Advance %d: %v", rev, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	mark, err := rs[1].store.Mark(ctx, resource)
	if err != nil || mark.Revision != highest {
		t.Errorf("final mark %v (%v), want the highest accepted %d", mark, err, highest)
	}
	// Every value the key ever held, in commit order.
	w := rs[0].cli.Watch(ctx, rs[0].store.Key(resource), clientv3.WithRev(start.Header.Revision+1))
	var history []int64
	for wr := range w {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			m, err := fence.Parse(string(ev.Kv.Value))
			if err != nil {
				t.Fatal(err)
			}
			history = append(history, m.Revision)
		}
		if len(history) > 0 && history[len(history)-1] == highest {
			break
		}
	}
	cancel()
	for i := 1; i < len(history); i++ {
		if history[i] <= history[i-1] {
			t.Errorf("mark went from %d to %d in etcd: %v", history[i-1], history[i], history)
		}
	}
	t.Logf("%d advances accepted, mark history %v", accepted, history)
}

// TestEtcdStoreDataTxnClosesWindow shows the cross-replica window of the
// package doc and how EtcdStore.Key closes it for data kept in etcd.
func TestEtcdStoreDataTxnClosesWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := newReplicas(t, 2)
	a, b := rs[0], rs[1]
	tgt := guard.Target{Resource: "doc", Lock: "docs"}
	const dataKey = "/fencekit-test/data/doc"
	// Write the data only if the mark still is this writer's token.
	fencedPut := func(r replica, t fence.Token, value string) (bool, error) {
		resp, err := r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(r.store.Key(tgt.Resource)), "=", t.String())).
			Then(clientv3.OpPut(dataKey, value)).
			Commit()
		if err != nil {
			return false, err
		}
		return resp.Succeeded, nil
	}

	aAdmitted, aWrite := make(chan struct{}), make(chan struct{})
	aResult := make(chan error, 1)
	go func() {
		aResult <- a.g.Do(ctx, tgt, tok("docs", 11), func(context.Context) error {
			close(aAdmitted)
			<-aWrite // A stalls inside its admitted write: the window.
			ok, err := fencedPut(a, tok("docs", 11), "from A")
			if err == nil && !ok {
				err = fence.ErrStale
			}
			return err
		})
	}()
	<-aAdmitted
	if err := b.g.Do(ctx, tgt, tok("docs", 12), func(context.Context) error {
		ok, err := fencedPut(b, tok("docs", 12), "from B")
		if err == nil && !ok {
			t.Error("B's fenced put failed")
		}
		return err
	}); err != nil {
		t.Fatalf("B with 12 while A was inside its write: %v (replicas do not wait for each other)", err)
	}
	close(aWrite)
	if err := <-aResult; !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's late data Txn: %v, want it refused", err)
	}
	resp, err := a.cli.Get(ctx, dataKey)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "from B" {
		t.Errorf("data = %v (%v), want from B", resp, err)
	}
}

// TestEtcdStoreCorruptMark: a value in the mark key that is not a token is
// a failure, never a silent reset of the mark.
func TestEtcdStoreCorruptMark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newReplicas(t, 1)[0]
	if _, err := r.cli.Put(ctx, r.store.Key("x"), "garbage"); err != nil {
		t.Fatal(err)
	}
	err := r.g.Do(ctx, guard.Target{Resource: "x", Lock: "l"}, tok("l", 1), func(context.Context) error {
		t.Error("write ran over a corrupt mark")
		return nil
	})
	if err == nil || errors.As(err, new(*fence.RefusedError)) || !errors.Is(err, fence.ErrSyntax) {
		t.Errorf("Do over corrupt mark: %v, want a store failure wrapping fence.ErrSyntax", err)
	}
}

// TestHTTPTwoReplicasOnEtcd: two HTTP replicas of one service share marks.
func TestHTTPTwoReplicasOnEtcd(t *testing.T) {
	rs := newReplicas(t, 2)
	a, b := newItemServer(t, rs[0].g), newItemServer(t, rs[1].g)
	if status, _ := send(t, http.MethodPut, b.srv.URL+"/items/9", "new", "70:items"); status != http.StatusNoContent {
		t.Fatalf("write with 70 to replica B: %d", status)
	}
	status, p := send(t, http.MethodPut, a.srv.URL+"/items/9", "old", "60:items")
	if status != http.StatusConflict || p.Type != guard.ProblemType(fence.Stale) || p.Mark != "70:items" || p.Token != "60:items" {
		t.Errorf("write with 60 to replica A: %d %+v, want 409 stale with mark 70", status, p)
	}
	if got := a.item("9"); got != "" {
		t.Errorf("replica A applied %q", got)
	}
	if status, _ := send(t, http.MethodPut, a.srv.URL+"/items/9", "newer", "71:items"); status != http.StatusNoContent {
		t.Errorf("write with 71 to replica A: %d", status)
	}
}
