package objguard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/objguard"
)

// TestConcurrentWriters: 16 writers, each a Guard of its own with a token
// of its own (revisions interleaved: the writers start in a shuffled
// order), write 4 objects concurrently, 12 times each, unique bytes per
// write. The store's history of every object, ordered by the ETag chain
// the proxy recorded, never lets an older token overwrite a newer one;
// every write acknowledged to a writer is in it; each object ends with
// the bytes of the highest token that wrote it, and that writer was never
// refused.
func TestConcurrentWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := startStore(t)
	p := startProxy(t, s.srv.Endpoint, s.bucket)
	cli := newClient(t, p.URL)
	const writers, objects, rounds = 16, 4, 12
	keys := make([]string, objects)
	for i := range keys {
		keys[i] = fmt.Sprintf("c/%d", i)
	}
	order := rand.Perm(writers)
	var (
		mu      sync.Mutex
		acked   = map[string]bool{} // bytes acknowledged
		refused = map[int64]int{}   // refusals by revision
		wg      sync.WaitGroup
	)
	errs := make(chan error, writers)
	for w := range writers {
		g, err := objguard.New(ctx, cli, s.bucket, objguard.WithoutProbe())
		if err != nil {
			t.Fatal(err)
		}
		tok := fence.Token{Lock: "c", Revision: int64(100 + w)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(order[w]) * 3 * time.Millisecond)
			for r := range rounds {
				for _, k := range keys {
					body := fmt.Sprintf("%s by %d round %d", k, tok.Revision, r)
					_, err := g.Put(ctx, k, tok, []byte(body))
					mu.Lock()
					switch {
					case err == nil:
						acked[body] = true
					case errors.Is(err, fence.ErrStale):
						refused[tok.Revision]++
					default:
						mu.Unlock()
						errs <- fmt.Errorf("writer %d: %w", tok.Revision, err)
						return
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	writes, _ := p.writes()
	ordered, stale, first, err := checkHistory(writes)
	if err != nil {
		t.Fatal(err)
	}
	if stale != 0 {
		t.Errorf("%d stale writes accepted; first: %s", stale, first)
	}
	top := int64(100 + writers - 1)
	if refused[top] != 0 {
		t.Errorf("the newest writer was refused %d times", refused[top])
	}
	n := 0
	for _, k := range keys {
		h := ordered[k]
		n += len(h)
		last := h[len(h)-1]
		if last.token != (fence.Token{Lock: "c", Revision: top}).String() {
			t.Errorf("%s: last write by %s, want the newest token %d", k, last.token, top)
		}
		if got, want := s.read(t, k), fmt.Sprintf("%s by %d round %d", k, top, rounds-1); got != want {
			t.Errorf("%s holds %q, want %q", k, got, want)
		}
	}
	if n < len(acked) {
		t.Errorf("history has %d writes, fewer than the %d acknowledged", n, len(acked))
	}
	total := 0
	for _, c := range refused {
		total += c
	}
	t.Logf("%d writes applied, %d acknowledged, %d refused as stale, 0 stale accepted", n, len(acked), total)
}
