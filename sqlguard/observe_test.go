package sqlguard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/prometheus/client_golang/prometheus"
)

// counters returns the values of the metric family name in reg, keyed by
// its label pairs.
func counters(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	return promtest.Values(t, reg, name)
}

// observed replaces e's Guard with one that has metrics on a fresh
// registry and a JSON logger into the returned buffer.
func (e *env) observed() (*prometheus.Registry, *bytes.Buffer) {
	e.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	var buf bytes.Buffer
	e.g = e.newGuard(sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithRequestTable(e.prefix+"req"),
		sqlguard.WithMetrics(reg), sqlguard.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	return reg, &buf
}

// TestMetricsAndLogs drives every op to each of its outcomes on every
// database and checks the counters, the retry counter and the refusal
// records.
func TestMetricsAndLogs(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		reg, logs := e.observed()
		want := map[string]float64{}
		for _, op := range []string{"fence", "update", "upsert", "claim", "record"} {
			for _, o := range []string{"accepted", "stale", "wrong_lock", "not_found", "duplicate", "retryable", "invalid", "unverified", "failed", "mark_ahead"} {
				want["op="+op+",outcome="+o] = 0
			}
		}
		check := func(what string) {
			t.Helper()
			got := counters(t, reg, "fencekit_sqlguard_decisions_total")
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %s = %v, want %v", what, k, got[k], v)
				}
			}
			if len(got) != len(want) {
				t.Errorf("%s: %d series, want %d: %v", what, len(got), len(want), got)
			}
		}
		check("before any call")

		// Fence: accepted, stale, wrong lock, invalid token, *sql.DB.
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatal(err)
		}
		if err := e.fenceTx(tok(4), "acct"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale fence: %v", err)
		}
		if err := e.fenceTx(fence.Token{Lock: "other", Revision: 9}, "acct"); !errors.Is(err, fence.ErrWrongLock) {
			t.Fatalf("wrong-lock fence: %v", err)
		}
		if err := e.g.Fence(ctx, e.db, tok(0), "acct"); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Fatalf("fence with revision 0: %v", err)
		}
		if err := e.g.Fence(ctx, e.db, tok(5), "acct"); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Fatalf("fence on *sql.DB: %v", err)
		}
		want["op=fence,outcome=accepted"] = 1
		want["op=fence,outcome=stale"] = 1
		want["op=fence,outcome=wrong_lock"] = 1
		want["op=fence,outcome=invalid"] = 2
		check("after Fence")

		// RunTx: the first attempt's fn hits a conflict, the second
		// commits; both attempts' fences count, and one retry.
		attempts := 0
		err := e.g.RunTx(ctx, e.db, nil, tok(5), []string{"acct"}, func(context.Context, *testTx) error {
			attempts++
			if attempts == 1 {
				return fmt.Errorf("%w: %w", sqlguard.ErrRetryable, errors.New("simulated serialization failure"))
			}
			return nil
		})
		if err != nil || attempts != 2 {
			t.Fatalf("RunTx = %v after %d attempts, want nil after 2", err, attempts)
		}
		want["op=fence,outcome=accepted"] += 2
		if got := counters(t, reg, "fencekit_sqlguard_retries_total")[""]; got != 1 {
			t.Errorf("retries = %v, want 1", got)
		}

		// Claim counts once as "claim", not as "fence".
		if err := e.g.Claim(ctx, e.db, tok(6), "acct"); err != nil {
			t.Fatal(err)
		}
		if err := e.g.Claim(ctx, e.db, tok(3), "acct"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale claim: %v", err)
		}
		if err := e.g.Claim(ctx, e.db, tok(6)); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Fatalf("claim of nothing: %v", err)
		}
		want["op=claim,outcome=accepted"] = 1
		want["op=claim,outcome=stale"] = 1
		want["op=claim,outcome=invalid"] = 1
		check("after RunTx and Claim")

		// Row-column mode.
		items := e.items()
		e.exec("INSERT INTO " + items + " (id, val, fence) VALUES ('a', 'init', 0)")
		idIs := "id = " + e.ph(1)
		if _, err := e.update(7, items, "x", idIs, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.update(6, items, "y", idIs, "a"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale update: %v", err)
		}
		if _, err := e.update(8, items, "y", idIs, "missing"); !errors.Is(err, sqlguard.ErrNoRow) {
			t.Fatalf("update of no row: %v", err)
		}
		upsert := func(rev int64) error {
			return e.g.Upsert(ctx, e.db, tok(rev), sqlguard.RowUpsert{Table: items,
				Key: []sqlguard.Assign{{Column: "id", Value: "b"}}, Set: []sqlguard.Assign{{Column: "val", Value: "v"}}})
		}
		if err := upsert(10); err != nil {
			t.Fatal(err)
		}
		if err := upsert(9); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale upsert: %v", err)
		}
		want["op=update,outcome=accepted"] = 1
		want["op=update,outcome=stale"] = 1
		want["op=update,outcome=not_found"] = 1
		want["op=upsert,outcome=accepted"] = 1
		want["op=upsert,outcome=stale"] = 1

		// Record: new, then duplicate.
		const requestID = "req-secret-4711"
		for i, wantErr := range []error{nil, sqlguard.ErrDuplicate} {
			tx := e.begin(ctx)
			err := e.g.Record(ctx, tx, requestID)
			if !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
				t.Fatalf("Record #%d = %v, want %v", i+1, err, wantErr)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		want["op=record,outcome=accepted"] = 1
		want["op=record,outcome=duplicate"] = 1
		check("after row-column and Record")

		// One Warn record per refusal: 1 stale and 1 wrong-lock Fence, 1
		// stale Claim, 1 stale Update, 1 stale Upsert, 1 duplicate.
		var recs []map[string]any
		for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
			var r map[string]any
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			recs = append(recs, r)
		}
		type key struct{ op, outcome string }
		byKey := map[key]map[string]any{}
		for _, r := range recs {
			if r["level"] != "WARN" {
				t.Errorf("record at %v: %v", r["level"], r)
			}
			byKey[key{r["op"].(string), r["outcome"].(string)}] = r
		}
		if len(recs) != 6 || len(byKey) != 6 {
			t.Fatalf("got %d records, want 6 distinct:\n%s", len(recs), logs)
		}
		ordersHash := logattr.Hash("orders")
		for k, fields := range map[key]map[string]any{
			{"fence", "stale"}:      {"resource": "acct", "lock": ordersHash, "fence": 4.0, "mark": 5.0},
			{"fence", "wrong_lock"}: {"resource": "acct", "lock": ordersHash, "fence": 9.0, "fence_lock": logattr.Hash("other")},
			{"claim", "stale"}:      {"resource": "acct", "lock": ordersHash, "fence": 3.0, "mark": 6.0},
			{"update", "stale"}:     {"resource": items, "lock": ordersHash, "fence": 6.0, "mark": 7.0},
			{"upsert", "stale"}:     {"resource": items, "lock": ordersHash, "fence": 9.0, "mark": 10.0},
			{"record", "duplicate"}: {"request": logattr.Hash(requestID)},
		} {
			r := byKey[k]
			if r == nil {
				t.Errorf("no %v record:\n%s", k, logs)
				continue
			}
			for f, v := range fields {
				if r[f] != v {
					t.Errorf("%v record: %s = %v, want %v", k, f, r[f], v)
				}
			}
		}
		for _, secret := range []string{requestID, `"orders"`, `"other"`} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("logs carry %s in clear:\n%s", secret, logs)
			}
		}
	})
}

func TestObserveOptionsValidate(t *testing.T) {
	if _, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithMetrics(nil)); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Errorf("WithMetrics(nil) = %v, want ErrInvalid", err)
	}
	if _, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithLogger(nil)); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Errorf("WithLogger(nil) = %v, want ErrInvalid", err)
	}
	// Guards on one registry share the collectors.
	reg := prometheus.NewPedanticRegistry()
	for i := range 2 {
		if _, err := sqlguard.New(sqlguard.PostgreSQL, sqlguard.WithMetrics(reg)); err != nil {
			t.Fatalf("Guard #%d on a shared registry: %v", i+1, err)
		}
	}
	// A foreign collector with the same name is an error.
	reg = prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencekit_sqlguard_retries_total", Help: "x"}))
	if _, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithMetrics(reg)); err == nil {
		t.Error("registering over a foreign collector of the same name: got nil error")
	}
}
