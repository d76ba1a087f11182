package objguard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/objguard"
)

// soakCounts are what the soak's workers saw.
type soakCounts struct {
	acquired, waits, accepted, stale, unverified, unknown, other atomic.Int64
}

// TestSoak is a short safety soak: 4 workers, each a program of its own
// (a lease.Client behind a TCP proxy to etcd, a Guard with a
// lease.Verifier), take the lock "soak" in turn and write and delete 3
// objects through one HTTP proxy to versitygw, while faults hit them:
// partitions from etcd past the 1 s TTL (a nemesis pauses a worker's etcd
// proxy), holders that pause past their TTL between acquiring and
// writing, requests held in flight past the TTL, and replies of the store
// dropped after it applied the write (the client does not retry: the
// outcome is unknown to the worker, and its Guard forgets the version). The store's history of each object, ordered by
// the ETag chain the proxy recorded, must hold no write with a token older
// than one applied before it, and every write acknowledged to a worker
// must be in it; and (but for -short, 3 s) the run must have seen both
// accepted and refused writes. FENCEKIT_OBJGUARD_SOAK sets the duration
// (default 10s).
func TestSoak(t *testing.T) {
	dur := 10 * time.Second
	if v := os.Getenv("FENCEKIT_OBJGUARD_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	if testing.Short() {
		dur = 3 * time.Second
	}
	s := startStore(t)
	c := etcdtest.Start(t)
	verifier, err := lease.NewVerifier(etcdtest.Client(t, c), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, s.srv.Endpoint, s.bucket)
	// No SDK retries: a lost reply reaches the Guard as an unknown outcome.
	cli := newClient(t, p.URL, func(o *s3.Options) { o.RetryMaxAttempts = 1 })

	const workers = 4
	keys := []string{"soak/a", "soak/b", "soak/c"}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		counts soakCounts
		mu     sync.Mutex
		acked  = map[string]bool{} // ETags acknowledged
		wg     sync.WaitGroup
	)
	links := make([]*faultproxy.Proxy, workers)
	ls := make([]*lease.Client, workers)
	gs := make([]*objguard.Guard, workers)
	for w := range workers {
		link, err := faultproxy.New(strings.TrimPrefix(c.Members[0].ClientURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		links[w] = link
		locks, err := lease.New(etcdtest.Client(t, c, link.URL()), lease.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		g, err := objguard.New(context.Background(), cli, s.bucket, objguard.WithVerifier(verifier))
		if err != nil {
			t.Fatal(err)
		}
		gs[w] = g
		ls[w] = locks
	}
	for w := range workers {
		link, locks, g := links[w], ls[w], gs[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer link.Close()
			defer locks.Close()
			for ctx.Err() == nil {
				soakHold(ctx, w, link, locks, g, keys, &counts, func(etag string) {
					mu.Lock()
					acked[etag] = true
					mu.Unlock()
				})
			}
		}()
	}
	p.faults( // after the Guards' probes
		func(r *http.Request) bool { return r.Method != http.MethodHead && rand.IntN(100) < 5 },
		func(r *http.Request) time.Duration {
			if r.Method == http.MethodPut && rand.IntN(100) < 3 {
				return 1200*time.Millisecond + rand.N(600*time.Millisecond)
			}
			return 0
		})
	wg.Add(1)
	go func() { // the nemesis: partitions from etcd past the TTL
		defer wg.Done()
		for ctx.Err() == nil {
			link := links[rand.IntN(workers)]
			link.Pause()
			select {
			case <-ctx.Done():
			case <-time.After(1300 * time.Millisecond):
			}
			link.Resume()
			select {
			case <-ctx.Done():
			case <-time.After(1700 * time.Millisecond):
			}
		}
	}()
	wg.Wait()

	writes, dropped := p.writes()
	ordered, stale, first, err := checkHistory(writes)
	if err != nil {
		t.Fatal(err)
	}
	inHistory := map[string]bool{}
	n := 0
	for _, h := range ordered {
		n += len(h)
		for _, w := range h {
			inHistory[w.etag] = true
		}
	}
	lost := 0
	for e := range acked {
		if !inHistory[e] {
			lost++
		}
	}
	t.Logf("%s: %d acquisitions (%d waits given up); writes: %d accepted, %d refused stale, %d unverified, %d unknown (lost reply or failure), %d other; "+
		"store applied %d, %d replies dropped; stale writes accepted: %d; acknowledged writes missing: %d",
		dur, counts.acquired.Load(), counts.waits.Load(), counts.accepted.Load(), counts.stale.Load(), counts.unverified.Load(),
		counts.unknown.Load(), counts.other.Load(), n, dropped, stale, lost)
	if stale != 0 {
		t.Errorf("%d stale writes accepted; first: %s", stale, first)
	}
	if lost != 0 {
		t.Errorf("%d acknowledged writes are not in the store's history", lost)
	}
	if !testing.Short() && (counts.accepted.Load() == 0 || counts.stale.Load()+counts.unverified.Load() == 0) {
		t.Errorf("the soak did not exercise both paths: %d accepted, %d refused", counts.accepted.Load(), counts.stale.Load()+counts.unverified.Load())
	}
}

// soakHold is one turn of a soak worker: acquire, maybe pause past the
// TTL, write and delete a few times, release.
func soakHold(ctx context.Context, w int, link *faultproxy.Proxy, locks *lease.Client, g *objguard.Guard, keys []string, counts *soakCounts, ack func(string)) {
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	l, err := locks.Acquire(actx, "soak")
	cancel()
	if err != nil {
		counts.waits.Add(1)
		return
	}
	counts.acquired.Add(1)
	tok := l.Fence()
	for i := range 6 {
		if rand.IntN(100) < 15 { // the whole program pauses past the TTL, its etcd link too
			link.Pause()
			select {
			case <-ctx.Done():
			case <-time.After(1200*time.Millisecond + rand.N(500*time.Millisecond)):
			}
			link.Resume()
		}
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		key := keys[rand.IntN(len(keys))]
		var o objguard.Object
		if rand.IntN(100) < 10 {
			err = g.Delete(wctx, key, tok)
		} else {
			o, err = g.Put(wctx, key, tok, fmt.Appendf(nil, "%s by worker %d token %d write %d %x", key, w, tok.Revision, i, rand.Uint64()))
		}
		cancel()
		switch {
		case err == nil:
			counts.accepted.Add(1)
			if o.ETag != "" {
				ack(o.ETag)
			}
		case errors.Is(err, fence.ErrStale):
			counts.stale.Add(1)
		case errors.Is(err, fence.ErrUnverified):
			counts.unverified.Add(1)
		case errors.Is(err, objguard.ErrContended) || errors.Is(err, fence.ErrWrongLock):
			counts.other.Add(1)
		default:
			counts.unknown.Add(1)
		}
	}
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = l.Release(rctx)
	cancel()
}
