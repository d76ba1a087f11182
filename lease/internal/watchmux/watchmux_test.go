package watchmux_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease/internal/watchmux"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.EtcdLeaks...)
}

// recorder is a Sink and Stats that records what it was given.
type recorder struct {
	mu       sync.Mutex
	got      []string // "put k v" / "del k"
	resynced map[string]string
	events   int
	watches  int
}

func (r *recorder) Put(kv *mvccpb.KeyValue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, "put "+string(kv.Key)+" "+string(kv.Value))
}

func (r *recorder) Deleted(key string, _ int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, "del "+key)
}

func (r *recorder) Resync(covers func(string) bool, present map[string]*mvccpb.KeyValue, _ int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resynced = map[string]string{}
	for k, kv := range present {
		if covers(k) {
			r.resynced[k] = string(kv.Value)
		}
	}
	return true
}

func (r *recorder) Events(n int)       { r.mu.Lock(); r.events += n; r.mu.Unlock() }
func (r *recorder) Watching(delta int) { r.mu.Lock(); r.watches += delta; r.mu.Unlock() }

func (r *recorder) snapshot() (got []string, resynced map[string]string, events, watches int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...), r.resynced, r.events, r.watches
}

// newSet starts a Set on cli that runs until the test ends; its lock is
// the caller's to hold around Set calls (mu).
func newSet(t *testing.T, cli *clientv3.Client, rec *recorder) (*watchmux.Set, *sync.Mutex) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	set := watchmux.New(watchmux.Config{Etcd: cli, Context: ctx, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Go: func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() },
		Sleep: func(d time.Duration) bool {
			select {
			case <-time.After(d):
				return true
			case <-ctx.Done():
				return false
			}
		},
		TTL: time.Second, Sink: rec, Stats: rec, Used: func(string) bool { return false }, Mu: &sync.Mutex{}})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return set, &sync.Mutex{}
}

func waitCreated(t *testing.T, set *watchmux.Set, w *watchmux.Watch) {
	t.Helper()
	select {
	case <-set.Created(w):
	case <-time.After(10 * time.Second):
		t.Fatal("watch not confirmed")
	}
}

// A key's watch and a directory's watch, carried by one stream, deliver
// every change of what they cover, in order, and nothing else; a dropped
// directory watch stops, an own key's watch stays until swept.
func TestSetDeliversWhatItCovers(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &recorder{}
	set, mu := newSet(t, cli, rec)

	mu.Lock()
	own := set.Own("k/a")
	dir := set.Hold("d/", true)
	mu.Unlock()
	waitCreated(t, set, own)
	waitCreated(t, set, dir)
	if own.Start() <= 0 || !own.Covers("k/a") || own.Covers("k/b") || !dir.Covers("d/x") {
		t.Fatalf("start %d, covers wrong", own.Start())
	}
	for _, op := range []clientv3.Op{clientv3.OpPut("k/a", "1"), clientv3.OpPut("k/b", "no"), clientv3.OpPut("d/x", "2"),
		clientv3.OpDelete("k/a"), clientv3.OpDelete("d/x")} {
		if _, err := cli.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"put k/a 1", "put d/x 2", "del k/a", "del d/x"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _, events, watches := rec.snapshot()
		if len(got) == len(want) {
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("got %q; want %q", got, want)
				}
			}
			if events != 4 || watches != 2 {
				t.Fatalf("events %d, watches %d; want 4, 2", events, watches)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %q; want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}

	mu.Lock()
	set.Drop(dir)
	set.Sweep() // own is unused: it starts idling, and stays
	current := set.Current(own) && !set.Current(dir)
	mu.Unlock()
	if _, _, _, watches := rec.snapshot(); !current || watches != 1 {
		t.Fatalf("after drop: current %v, watches %d; want own kept, 1 watch", current, watches)
	}
}

// A watch whose next events were compacted away while its stream was
// down reads its keys instead (Resync) and resumes after the read.
func TestSetResyncsAfterCompaction(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	px, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &recorder{}
	set, mu := newSet(t, etcdtest.Client(t, cl, px.URL()), rec)

	mu.Lock()
	dir := set.Hold("c/", true)
	mu.Unlock()
	waitCreated(t, set, dir)
	px.Blackhole()
	for _, op := range []clientv3.Op{clientv3.OpPut("c/x", "1"), clientv3.OpPut("c/y", "2"), clientv3.OpDelete("c/x"), clientv3.OpPut("other", "3")} {
		if _, err := direct.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := direct.Get(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	px.Resume()
	px.ResetConns()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, resynced, _, _ := rec.snapshot()
		if resynced != nil {
			if len(got) != 0 || len(resynced) != 1 || resynced["c/y"] != "2" {
				t.Fatalf("events %q, resync %v; want no event and a resync of c/y=2 only", got, resynced)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never resynced; events %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := direct.Put(ctx, "c/z", "4"); err != nil {
		t.Fatal(err)
	}
	for {
		got, _, _, _ := rec.snapshot()
		if len(got) == 1 && got[0] == "put c/z 4" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %q; want the put after the resync only", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
