package pgxguard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// TestObserved: the pgx path counts and logs its decisions like the
// database/sql path, with tokens verified against a real etcd, and a
// Guard shared with Wrap shares the counters.
func TestObserved(t *testing.T) {
	dsnOrSkip(t, envPG) // before starting etcd
	cluster := etcdtest.Start(t)
	locks, err := lease.New(etcdtest.Client(t, cluster), lease.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	forEach(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := locks.Acquire(ctx, "orders-"+e.prefix)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		reg := prometheus.NewPedanticRegistry()
		var buf bytes.Buffer
		g := e.guard(sqlguard.WithMetrics(reg), sqlguard.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))),
			sqlguard.WithVerifier(locks.Verifier()))

		real := l.Fence()
		forged := fence.Token{Lock: real.Lock, Revision: real.Revision + 1000}
		old := fence.Token{Lock: real.Lock, Revision: real.Revision - 1}
		run := func(g *pgxguard.Guard, tk fence.Token) error {
			return g.RunTx(ctx, e.pool, pgx.TxOptions{}, tk, []string{"acct"}, func(ctx context.Context, tx pgx.Tx) error {
				return g.Record(ctx, tx, "req-"+tk.String())
			})
		}
		if err := run(g, forged); !errors.Is(err, fence.ErrUnverified) {
			t.Fatalf("forged token: got %v, want ErrUnverified", err)
		}
		if err := run(g, real); err != nil {
			t.Fatalf("real token: %v", err)
		}
		if err := run(g, real); !errors.Is(err, sqlguard.ErrDuplicate) {
			t.Fatalf("same request: got %v, want ErrDuplicate", err)
		}
		// An unverifying guard sharing the table lets an old token reach
		// the database, which refuses it; the shared Guard counts it.
		shared, err := pgxguard.Wrap(g.SQL())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.guard().Claim(ctx, e.pool, old, "other"); err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if err := shared.Claim(ctx, e.pool, real, "other"); err != nil {
			t.Fatalf("Claim newer: %v", err)
		}
		if err := shared.Fence(ctx, e.pool, real, "acct"); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Fatalf("Fence on pool: %v", err)
		}
		got := promtest.Values(t, reg, "fencekit_sqlguard_decisions_total")
		for k, want := range map[string]float64{
			"op=fence,outcome=unverified": 1, "op=fence,outcome=accepted": 2, "op=record,outcome=accepted": 1,
			"op=record,outcome=duplicate": 1, "op=claim,outcome=accepted": 1, "op=fence,outcome=invalid": 1,
		} {
			if got[k] != want {
				t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
			}
		}
		var outcomes []string
		for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			outcomes = append(outcomes, rec["op"].(string)+"/"+rec["outcome"].(string))
			if strings.Contains(line, real.Lock) {
				t.Errorf("log line carries the lock name in clear: %s", line)
			}
		}
		if strings.Join(outcomes, " ") != "fence/unverified record/duplicate" {
			t.Errorf("logged %v", outcomes)
		}
	})
}
