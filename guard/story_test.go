package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// logRecord is one decoded JSON log line.
type logRecord map[string]any

// field returns the record's top-level key: the fields that join records
// are never nested.
func (r logRecord) field(key string) (any, bool) {
	v, ok := r[key]
	return v, ok
}

func (r logRecord) str(key string) string {
	v, _ := r.field(key)
	s, _ := v.(string)
	return s
}

// num returns a numeric field; JSON numbers decode as float64, exact for
// the revisions of a test cluster.
func (r logRecord) num(key string) (int64, bool) {
	v, ok := r.field(key)
	f, isNum := v.(float64)
	return int64(f), ok && isNum
}

// TestFullStoryKeepsOwnerTokensSecret runs the whole story on embedded
// etcd with logs and metrics on: A acquires and writes; A's link pauses
// past its TTL and its lease ends; B acquires and writes; A's late write is
// refused; A's release says not owner; B releases. No raw owner token may
// appear in any log record, error string, HTTP answer or metric, and the
// guard's rejection must join to A's lease records on "lock" and "fence".
func TestFullStoryKeepsOwnerTokensSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	var logs testkit.LogBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewPedanticRegistry()
	var seen []string // every error string and HTTP answer of the story
	record := func(s string) { seen = append(seen, s) }
	recordErr := func(err error) {
		if err != nil {
			record(err.Error())
			record(fmt.Sprintf("%+v %#v", err, err))
		}
	}

	store, err := etcdstore.New(etcdtest.Client(t, c), "/fencekit-test/marks/")
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(store, guard.WithLogger(logger), guard.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	svc := newItemServer(t, g)
	tr := &guard.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	write := func(l *lease.Lease, body string) int {
		t.Helper()
		status, b := svc.putWithToken(t, ctx, client, l.Fence(), "/items/report", body)
		record(string(b))
		return status
	}

	proxy, err := faultproxy.New(strings.TrimPrefix(c.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	opts := []lease.Option{lease.WithTTL(time.Second), lease.WithLogger(logger), lease.WithMetrics(reg)}
	locksA, err := lease.New(etcdtest.Client(t, c, proxy.URL()), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		proxy.Resume()
		locksA.Close()
	}()
	locksB, err := lease.New(etcdtest.Client(t, c), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer locksB.Close()
	inspect := etcdtest.Client(t, c)

	// A acquires and writes.
	a, err := locksA.Acquire(ctx, "items")
	if err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	tokenA := testkit.OwnerToken(t, ctx, inspect, a)
	if status := write(a, "draft by A"); status != http.StatusNoContent {
		t.Fatalf("A's write while holding: %d", status)
	}

	// A stalls past its TTL and loses the lease.
	proxy.Pause()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("A's lease did not end while its link to etcd was paused past the TTL")
	}
	if !errors.Is(a.Err(), lease.ErrLost) {
		t.Errorf("A's lease ended with %v, want ErrLost", a.Err())
	}
	recordErr(a.Err())

	// B acquires and writes.
	b, err := locksB.Acquire(ctx, "items")
	if err != nil {
		t.Fatalf("B acquire: %v", err)
	}
	tokenB := testkit.OwnerToken(t, ctx, inspect, b)
	if tokenA == tokenB {
		t.Fatal("A and B have the same owner token")
	}
	if status := write(b, "final by B"); status != http.StatusNoContent {
		t.Fatalf("B's write: %d", status)
	}

	// A wakes: its late write is refused, over HTTP and in Go.
	proxy.Resume()
	if status := write(a, "late by A"); status != guard.HTTPStatus(fence.Stale) {
		t.Errorf("A's late write: status %d, want %d", status, guard.HTTPStatus(fence.Stale))
	}
	err = g.Do(ctx, guard.Target{Resource: "item/report", Lock: "items"}, a.Fence(), func(context.Context) error { return nil })
	if !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's late Do = %v, want ErrStale", err)
	}
	recordErr(err)

	// A's release finds B's acquisition; B's release is done.
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	err = a.Release(rctx)
	if !errors.Is(err, lease.ErrNotOwner) {
		t.Errorf("A's release = %v, want ErrNotOwner", err)
	}
	recordErr(err)
	if err := b.Release(ctx); err != nil {
		t.Fatalf("B's release: %v", err)
	}
	err = b.Release(ctx) // a duplicate release is an error, and counted
	if err == nil {
		t.Error("B's second release: got nil")
	}
	recordErr(err)
	for _, l := range []*lease.Lease{a, b} {
		record(l.String())
		record(fmt.Sprintf("%v %+v %#v", l, l, l))
		recordErr(l.Err())
	}

	// Gather everything the story produced.
	var metrics strings.Builder
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&metrics, f); err != nil {
			t.Fatal(err)
		}
	}
	logText := logs.String()
	everything := map[string]string{
		"logs":    logText,
		"metrics": metrics.String(),
		"errors":  strings.Join(seen, "\n"),
	}
	for name, tok := range map[string]string{"A": tokenA, "B": tokenB} {
		// The last part of a token is its random request id: the secret.
		random := tok[strings.LastIndexByte(tok, '.')+1:]
		if len(random) < 12 {
			t.Fatalf("owner token of %s has a random part of %d bytes", name, len(random))
		}
		for where, text := range everything {
			if strings.Contains(text, tok) {
				t.Errorf("%s carry %s's raw owner token", where, name)
			}
			if strings.Contains(text, random) {
				t.Errorf("%s carry the random part of %s's owner token", where, name)
			}
		}
	}
	for _, want := range []string{"fencekit_lease_acquisitions_total", "fencekit_lease_losses_total",
		"fencekit_lease_duplicate_releases_total", `fencekit_guard_decisions_total{outcome="stale"} 2`,
		`fencekit_guard_decisions_total{outcome="accepted"} 2`} {
		if !strings.Contains(everything["metrics"], want) {
			t.Errorf("metrics lack %s:\n%s", want, everything["metrics"])
		}
	}

	// Join: the guard's stale rejection names the same lock hash and A's
	// fence revision, as A's lease records do.
	var recs []logRecord
	for line := range strings.SplitSeq(strings.TrimSpace(logText), "\n") {
		var r logRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	var rejection logRecord
	var aRecs []logRecord
	for _, r := range recs {
		if strings.HasPrefix(r.str("msg"), "guard") && r.str("outcome") == "stale" && rejection == nil {
			rejection = r
		}
		if r.str("owner") == a.OwnerDigest() {
			aRecs = append(aRecs, r)
		}
	}
	if rejection == nil {
		t.Fatalf("no guard stale rejection in the logs:\n%s", logText)
	}
	lockHash := rejection.str("lock")
	if lockHash != logattr.Hash("items") || lockHash != guard.LockHash("items") {
		t.Errorf("rejection lock = %q, want the hash of \"items\" %s", lockHash, logattr.Hash("items"))
	}
	if rev, ok := rejection.num("fence"); !ok || rev != a.Fence().Revision {
		t.Errorf("rejection fence = %v, want A's revision %d", rejection["fence"], a.Fence().Revision)
	}
	if rev, ok := rejection.num("mark"); !ok || rev != b.Fence().Revision {
		t.Errorf("rejection mark = %v, want B's revision %d", rejection["mark"], b.Fence().Revision)
	}
	if rejection.str("resource") != "item/report" {
		t.Errorf("rejection resource = %q, want item/report", rejection.str("resource"))
	}
	msgs := map[string]bool{}
	for _, r := range aRecs {
		msgs[r.str("msg")] = true
		if got := r.str("lock"); got != lockHash {
			t.Errorf("A's %q record: lock %q, rejection's %q", r.str("msg"), got, lockHash)
		}
		if rev, ok := r.num("fence"); !ok || rev != a.Fence().Revision {
			t.Errorf("A's %q record: fence %v, want %d", r.str("msg"), rev, a.Fence().Revision)
		}
	}
	for _, m := range []string{"lease acquired", "lease lost"} {
		if !msgs[m] {
			t.Errorf("no %q record for A (owner %s) among %v", m, a.OwnerDigest(), msgs)
		}
	}
}
