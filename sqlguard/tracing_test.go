package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/spantest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracedGuard is a Guard on e's tables that traces through tp.
func (e *env) tracedGuard(tp trace.TracerProvider) *sqlguard.Guard {
	e.t.Helper()
	opts := []sqlguard.Option{sqlguard.WithTable(e.prefix + "fence"), sqlguard.WithRequestTable(e.prefix + "req")}
	if tp != nil {
		opts = append(opts, sqlguard.WithTracerProvider(tp))
	}
	g, err := sqlguard.New(e.g.Dialect(), opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

// spanRow is the part of a span the tests compare.
type spanRow struct {
	name, outcome, mode, table string
	lock                       string // hash
	fence, mark                int64
	resource                   string
	failed                     bool // status Error
}

func rowOf(s spantest.Span) spanRow {
	a := testkit.SpanAttrs(s)
	return spanRow{
		name: strings.TrimPrefix(s.Name, "fencekit.sqlguard."), outcome: a["fencekit.outcome"].AsString(),
		mode: a["fencekit.mode"].AsString(), table: a["fencekit.table"].AsString(), lock: a["fencekit.lock"].AsString(),
		fence: a["fencekit.fence"].AsInt64(), mark: a["fencekit.mark"].AsInt64(),
		resource: a["fencekit.resource"].AsString(), failed: s.Status.Code == otelcodes.Error,
	}
}

// sqlguardSpans returns the spans of sqlguard's tracer.
func sqlguardSpans(exp *spantest.Recorder) []spantest.Span {
	return testkit.ScopeSpans(exp, "github.com/fencekit/fencekit/sqlguard")
}

// Every fenced call is a span with its outcome, mode, table, the lock's
// hash and the token's revision; refusals have status Error, and no span
// carries a lock name, an idempotency key or a row's key.
func TestTracingSpans(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		tp, exp := testkit.Tracing(t)
		g := e.tracedGuard(tp)
		ctx := context.Background()
		fenceTable := e.prefix + "fence"
		items := e.items()
		e.exec("INSERT INTO " + items + " (id, val) VALUES ('secret-row', 'a')")
		h := logattr.Hash("orders")

		var inFn trace.SpanContext
		if err := g.RunTx(ctx, e.db.DB, nil, tok(5), []string{"acct"}, func(ctx context.Context, tx *sql.Tx) error {
			inFn = trace.SpanContextFromContext(ctx)
			return nil
		}); err != nil {
			t.Fatalf("RunTx(5): %v", err)
		}
		if err := g.RunTx(ctx, e.db.DB, nil, tok(3), []string{"acct"}, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("RunTx(3) = %v, want ErrStale", err)
		}
		other := fence.Token{Lock: "invoices", Revision: 9}
		if err := g.RunTx(ctx, e.db.DB, nil, other, []string{"acct"}, nil); !errors.Is(err, fence.ErrWrongLock) {
			t.Fatalf("RunTx(other lock) = %v, want ErrWrongLock", err)
		}
		if err := g.Claim(ctx, e.db.DB, tok(6), "acct", "ledger"); err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if err := g.Fence(ctx, e.db.DB, tok(6), "acct"); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Fatalf("Fence on a pool = %v, want ErrNeedTx", err)
		}
		begin := func() *sql.Tx {
			t.Helper()
			tx, err := e.db.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx
		}
		tx := begin()
		if err := g.Record(ctx, tx, "request-key-1"); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		tx = begin()
		if err := g.Record(ctx, tx, "request-key-1"); !errors.Is(err, sqlguard.ErrDuplicate) {
			t.Fatalf("second Record = %v, want ErrDuplicate", err)
		}
		tx.Rollback()
		upd := func(rev int64, id string) error {
			_, err := g.Update(ctx, e.db.DB, tok(rev), sqlguard.RowUpdate{Table: items, Set: []sqlguard.Assign{{Column: "val", Value: "b"}},
				Where: "id = " + e.ph(1), WhereArgs: []any{id}})
			return err
		}
		if err := upd(5, "secret-row"); err != nil {
			t.Fatalf("Update(5): %v", err)
		}
		if err := upd(4, "secret-row"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Update(4) = %v, want ErrStale", err)
		}
		if err := upd(5, "no-such-row"); !errors.Is(err, sqlguard.ErrNoRow) {
			t.Fatalf("Update(missing row) = %v, want ErrNotFound", err)
		}
		ups := func(rev int64) error {
			return g.Upsert(ctx, e.db.DB, tok(rev), sqlguard.RowUpsert{Table: items,
				Key: []sqlguard.Assign{{Column: "id", Value: "secret-new"}}, Set: []sqlguard.Assign{{Column: "val", Value: "c"}}})
		}
		if err := ups(6); err != nil {
			t.Fatalf("Upsert(6): %v", err)
		}
		if err := ups(2); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Upsert(2) = %v, want ErrStale", err)
		}

		spans := sqlguardSpans(exp)
		var got []spanRow
		for _, s := range spans {
			got = append(got, rowOf(s))
			for _, text := range testkit.SpanTexts(s) {
				for _, secret := range []string{"orders", "invoices", "request-key-1", "secret-row", "secret-new"} {
					if strings.Contains(text, secret) {
						t.Errorf("span %s carries %q: %q", s.Name, secret, text)
					}
				}
			}
		}
		want := []spanRow{
			{name: "fence", outcome: "accepted", mode: "table", table: fenceTable, lock: h, fence: 5},
			{name: "tx", outcome: "accepted", mode: "table", table: fenceTable, lock: h, fence: 5},
			{name: "fence", outcome: "stale", mode: "table", table: fenceTable, lock: h, fence: 3, mark: 5, resource: "acct", failed: true},
			{name: "tx", outcome: "stale", mode: "table", table: fenceTable, lock: h, fence: 3, mark: 5, resource: "acct", failed: true},
			{name: "fence", outcome: "wrong_lock", mode: "table", table: fenceTable, lock: h, fence: 9, resource: "acct", failed: true},
			{name: "tx", outcome: "wrong_lock", mode: "table", table: fenceTable, lock: h, fence: 9, resource: "acct", failed: true},
			{name: "claim", outcome: "accepted", mode: "table", table: fenceTable, lock: h, fence: 6},
			{name: "fence", outcome: "invalid", mode: "table", table: fenceTable, lock: h, fence: 6, failed: true},
			{name: "record", outcome: "accepted", table: e.prefix + "req"},
			{name: "record", outcome: "duplicate", table: e.prefix + "req", failed: true},
			{name: "update", outcome: "accepted", mode: "row", table: items, lock: h, fence: 5},
			{name: "update", outcome: "stale", mode: "row", table: items, lock: h, fence: 4, mark: 5, resource: items, failed: true},
			{name: "update", outcome: "not_found", mode: "row", table: items, lock: h, fence: 5, failed: true},
			{name: "upsert", outcome: "accepted", mode: "row", table: items, lock: h, fence: 6},
			{name: "upsert", outcome: "stale", mode: "row", table: items, lock: h, fence: 2, mark: 6, resource: items, failed: true},
		}
		if len(got) != len(want) {
			for _, r := range got {
				t.Logf("got %+v", r)
			}
			t.Fatalf("%d spans, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("span %d: %+v\n\twant %+v", i, got[i], want[i])
			}
		}

		// RunTx's fence span is a child of its tx span, and fn runs in the
		// tx span's context.
		fenceSpan, txSpan := spans[0], spans[1]
		if fenceSpan.Parent.SpanID() != txSpan.SpanContext.SpanID() {
			t.Error("RunTx's fence span is not a child of its tx span")
		}
		if inFn.SpanID() != txSpan.SpanContext.SpanID() {
			t.Error("RunTx's function does not run in the tx span's context")
		}
		for i, key := range map[int]attribute.Key{1: "fencekit.attempts", 6: "fencekit.attempts", 10: "fencekit.rows"} {
			found := false
			for _, a := range spans[i].Attributes {
				if a.Key == key {
					found = a.Value.AsInt64() == 1
				}
			}
			if !found {
				t.Errorf("span %d (%s) lacks %s = 1: %v", i, spans[i].Name, key, spans[i].Attributes)
			}
		}
		for _, a := range spans[4].Attributes {
			if a.Key == "fencekit.fence_lock" && a.Value.AsString() != logattr.Hash("invoices") {
				t.Errorf("wrong-lock fence_lock = %q, want the hash of the token's lock", a.Value.AsString())
			}
		}
		for _, a := range spans[8].Attributes {
			if a.Key == "fencekit.request" && a.Value.AsString() != logattr.Hash("request-key-1") {
				t.Errorf("record's request = %q, want the hash of the key", a.Value.AsString())
			}
		}
	})
}

// Without WithTracerProvider a Guard records nothing: no span of its own,
// nothing on the caller's span, nothing through the global provider.
func TestTracingOffRecordsNothing(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		testkit.TracesNothing(t, func(ctx context.Context) {
			g := e.tracedGuard(nil)
			if err := g.RunTx(ctx, e.db.DB, nil, tok(5), []string{"acct"}, nil); err != nil {
				t.Fatal(err)
			}
			g.RunTx(ctx, e.db.DB, nil, tok(3), []string{"acct"}, nil)
			g.Claim(ctx, e.db.DB, tok(6), "acct")
		})
	})
	if _, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithTracerProvider(nil)); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Errorf("New with a nil TracerProvider = %v, want ErrInvalid", err)
	}
}

// With real leases traced on the same provider, A's write, B's write and
// A's late, refused write leave spans that carry no owner token.
func TestTracingKeepsOwnerTokensSecret(t *testing.T) {
	cluster := etcdtest.Start(t)
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tp, exp := testkit.Tracing(t)
		g := e.tracedGuard(tp)
		cli := etcdtest.Client(t, cluster)
		locksA, err := lease.New(cli, lease.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		defer locksA.Close()
		locksB, err := lease.New(cli, lease.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		defer locksB.Close()
		name := "accounts-" + e.prefix
		write := func(l *lease.Lease) error {
			return g.RunTx(ctx, e.db.DB, nil, l.Fence(), []string{"account/alice"}, nil)
		}

		a, err := locksA.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tokenA := testkit.OwnerToken(t, ctx, cli, a)
		if err := write(a); err != nil {
			t.Fatalf("A's write: %v", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := locksB.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tokenB := testkit.OwnerToken(t, ctx, cli, b)
		if err := write(b); err != nil {
			t.Fatalf("B's write: %v", err)
		}
		if err := write(a); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("A's late write = %v, want ErrStale", err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}

		var scopes = map[string]int{}
		for _, s := range exp.GetSpans() {
			scopes[s.Scope]++
		}
		testkit.NoOwnerTokens(t, exp.GetSpans(), map[string]string{"A": tokenA, "B": tokenB})
		if scopes["github.com/fencekit/fencekit/lease"] == 0 || scopes["github.com/fencekit/fencekit/sqlguard"] == 0 {
			t.Errorf("spans by scope %v: want lease's and sqlguard's", scopes)
		}
		var outcomes []string
		for _, s := range sqlguardSpans(exp) {
			if r := rowOf(s); r.name == "tx" {
				outcomes = append(outcomes, fmt.Sprintf("%s %d", r.outcome, r.fence))
			}
		}
		want := []string{fmt.Sprintf("accepted %d", a.Fence().Revision), fmt.Sprintf("accepted %d", b.Fence().Revision),
			fmt.Sprintf("stale %d", a.Fence().Revision)}
		if fmt.Sprint(outcomes) != fmt.Sprint(want) {
			t.Errorf("tx spans %v, want %v", outcomes, want)
		}
	})
}

// A RunTx that keeps failing with a retryable error records each retry as
// an event and ends with outcome retryable after its last attempt.
func TestTracingRetries(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		tp, exp := testkit.Tracing(t)
		g, err := sqlguard.New(e.g.Dialect(), sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithRequestTable(e.prefix+"req"),
			sqlguard.WithMaxAttempts(3), sqlguard.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		err = g.RunTx(context.Background(), e.db.DB, nil, tok(5), []string{"acct"}, func(context.Context, *sql.Tx) error {
			return fmt.Errorf("%w: %w", sqlguard.ErrRetryable, errors.New("conflict on orders"))
		})
		if !errors.Is(err, sqlguard.ErrRetryable) {
			t.Fatalf("RunTx = %v, want ErrRetryable", err)
		}
		var tx *spantest.Span
		fences := 0
		for _, s := range sqlguardSpans(exp) {
			switch s.Name {
			case "fencekit.sqlguard.tx":
				tx = &s
			case "fencekit.sqlguard.fence":
				fences++
			}
		}
		if tx == nil {
			t.Fatal("no tx span")
		}
		if r := rowOf(*tx); r.outcome != "retryable" || !r.failed {
			t.Errorf("tx span %+v, want outcome retryable and status Error", r)
		}
		if strings.Contains(tx.Status.Description, "orders") || !strings.Contains(tx.Status.Description, "conflict on "+logattr.Hash("orders")) {
			t.Errorf("status %q, want the error with the lock name hashed", tx.Status.Description)
		}
		var attempts int64
		for _, a := range tx.Attributes {
			if a.Key == "fencekit.attempts" {
				attempts = a.Value.AsInt64()
			}
		}
		var retries []int64
		for _, ev := range tx.Events {
			if ev.Name == "fencekit.sqlguard.retry" {
				retries = append(retries, ev.Attributes[0].Value.AsInt64())
			}
		}
		if attempts != 3 || fmt.Sprint(retries) != "[1 2]" || fences != 3 {
			t.Errorf("attempts %d, retry events after attempts %v, fence spans %d; want 3, [1 2], 3", attempts, retries, fences)
		}
	})
}
