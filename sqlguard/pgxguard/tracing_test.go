package pgxguard_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/fencekit/fencekit/fence"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/testsupport/spantest"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// sqlguard.WithTracerProvider traces the pgx path too: the same spans,
// names and attributes as database/sql, and none without it.
func TestTracing(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		exp := spantest.NewRecorder()
		tp := exp
		ctx := context.Background()
		g := e.guard(sqlguard.WithTracerProvider(tp))
		items := e.table("items", "id TEXT PRIMARY KEY, val TEXT, fence BIGINT NOT NULL DEFAULT 0")
		if _, err := e.pool.Exec(ctx, "INSERT INTO "+items+" (id, val) VALUES ('secret-row', 'a')"); err != nil {
			t.Fatal(err)
		}

		var inFn trace.SpanContext
		if err := g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(5), []string{"acct"}, func(ctx context.Context, tx pgx.Tx) error {
			inFn = trace.SpanContextFromContext(ctx)
			return nil
		}); err != nil {
			t.Fatalf("RunTx(5): %v", err)
		}
		if err := g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(3), []string{"acct"}, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("RunTx(3) = %v, want ErrStale", err)
		}
		if err := g.Claim(ctx, e.pool, tok(6), "acct"); err != nil {
			t.Fatalf("Claim: %v", err)
		}
		upd := func(rev int64) error {
			_, err := g.Update(ctx, e.pool, tok(rev), sqlguard.RowUpdate{Table: items,
				Set: []sqlguard.Assign{{Column: "val", Value: "b"}}, Where: "id = $1", WhereArgs: []any{"secret-row"}})
			return err
		}
		if err := upd(5); err != nil {
			t.Fatalf("Update(5): %v", err)
		}
		if err := upd(4); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Update(4) = %v, want ErrStale", err)
		}
		// Without the option: nothing more.
		if err := e.guard().RunTx(ctx, e.pool, pgx.TxOptions{}, tok(7), []string{"acct"}, nil); err != nil {
			t.Fatalf("untraced RunTx: %v", err)
		}

		type row struct{ name, outcome, mode, table, lock string }
		var got []row
		spans := exp.GetSpans()
		for _, s := range spans {
			a := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes {
				a[kv.Key] = kv.Value
			}
			got = append(got, row{s.Name, a["fencekit.outcome"].AsString(), a["fencekit.mode"].AsString(),
				a["fencekit.table"].AsString(), a["fencekit.lock"].AsString()})
			if (s.Status.Code == otelcodes.Error) != (a["fencekit.outcome"].AsString() != "accepted") {
				t.Errorf("span %s outcome %s with status %v", s.Name, a["fencekit.outcome"].AsString(), s.Status.Code)
			}
			for _, kv := range s.Attributes {
				if v := fmt.Sprint(kv.Value.AsInterface()); strings.Contains(v, "orders") || strings.Contains(v, "secret-row") {
					t.Errorf("span %s attribute %s = %q", s.Name, kv.Key, v)
				}
			}
			if strings.Contains(s.Status.Description, "orders") || strings.Contains(s.Status.Description, "secret-row") {
				t.Errorf("span %s status %q", s.Name, s.Status.Description)
			}
		}
		h, ft := logattr.Hash("orders"), e.prefix+"fence"
		want := []row{
			{"fencekit.sqlguard.fence", "accepted", "table", ft, h},
			{"fencekit.sqlguard.tx", "accepted", "table", ft, h},
			{"fencekit.sqlguard.fence", "stale", "table", ft, h},
			{"fencekit.sqlguard.tx", "stale", "table", ft, h},
			{"fencekit.sqlguard.claim", "accepted", "table", ft, h},
			{"fencekit.sqlguard.update", "accepted", "row", items, h},
			{"fencekit.sqlguard.update", "stale", "row", items, h},
		}
		if len(got) != len(want) {
			t.Fatalf("spans %v\n\twant %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("span %d: %v, want %v", i, got[i], want[i])
			}
		}
		if inFn.SpanID() != spans[1].SpanContext.SpanID() {
			t.Error("RunTx's function does not run in the tx span's context")
		}
		if _, err := pgxguard.New(sqlguard.WithTracerProvider(nil)); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Errorf("New with a nil TracerProvider = %v, want ErrInvalid", err)
		}
	})
}
