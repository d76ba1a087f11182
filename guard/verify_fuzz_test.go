package guard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/tokentest"
	"github.com/fencekit/fencekit/lease"
)

// FuzzVerifiedMiddleware: no request to the HTTP middleware of a Guard
// with a verifier moves a mark to anything but the token of the lock's
// current holder, on a real embedded etcd; and only that token's writes
// run.
func FuzzVerifiedMiddleware(f *testing.F) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(f)
	locks, err := lease.New(etcdtest.Client(f, c), lease.WithTTL(30*time.Second))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { locks.Close() })
	// Acquisitions that ended: their revisions must not move a mark either.
	for range 3 {
		l, err := locks.Acquire(ctx, "items")
		if err != nil {
			f.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			f.Fatal(err)
		}
	}
	holder, err := locks.Acquire(ctx, "items")
	if err != nil {
		f.Fatal(err)
	}
	real := holder.Fence()
	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(locks.Verifier()))
	if err != nil {
		f.Fatal(err)
	}
	mw := g.Middleware(itemRoute)
	var ran fence.Token
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran, _ = fence.FromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	}))

	f.Add(real.String(), "", uint8(1), false)
	f.Add("1099511627776:items", "", uint8(1), false)
	f.Add("3:items", real.String(), uint8(2), true)
	f.Add("0:items", "", uint8(1), false)
	f.Fuzz(func(t *testing.T, a, b string, n uint8, second bool) {
		path := "/items/1"
		if second {
			path = "/items/2"
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodPut, path, nil)
		for _, v := range tokentest.Values(a, b, n) {
			req.Header.Add(guard.Header, v)
		}
		ran = fence.Token{}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusNoContent && ran != real {
			t.Fatalf("headers %q: a write ran with %v; only the holder's %v may", req.Header.Values(guard.Header), ran, real)
		}
		for _, r := range []string{"item/1", "item/2"} {
			mark, err := g.Mark(ctx, r)
			if errors.Is(err, fence.ErrNoMark) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if mark != real {
				t.Fatalf("headers %q: mark of %s moved to %v; only the holder's %v may raise it", req.Header.Values(guard.Header), r, mark, real)
			}
		}
	})
}
