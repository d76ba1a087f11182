package pgxguard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/sqlguard"
	"github.com/jackc/pgx/v5"
)

// TestStressProperty: workers with old and new tokens race fenced
// transactions on one resource, directly and through PgBouncer. Every
// committed transaction logs the mark's seq it got and its token; ordered
// by seq (the commit order of fenced transactions), tokens never go down,
// and every seq appears once.
func TestStressProperty(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	forEach(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		logT := e.table("log", "seq BIGINT PRIMARY KEY, token BIGINT NOT NULL")
		var clock atomic.Int64
		clock.Store(1)
		const workers, rounds = 8, 25
		var accepted, stale atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range rounds {
					// Mostly the newest token, sometimes one a little old.
					tk := clock.Add(int64(rand.IntN(2)))
					if rand.IntN(4) == 0 {
						tk = max(1, tk-int64(rand.IntN(3)))
					}
					err := e.g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(tk), []string{"acct"}, func(ctx context.Context, tx pgx.Tx) error {
						m, err := e.g.Mark(ctx, tx, "acct")
						if err != nil {
							return err
						}
						_, err = tx.Exec(ctx, "INSERT INTO "+logT+" (seq, token) VALUES ($1, $2)", m.Seq, tk)
						return err
					})
					switch {
					case err == nil:
						accepted.Add(1)
					case errors.Is(err, sqlguard.ErrStale):
						stale.Add(1)
					default:
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("worker: %v", err)
		}
		rows, err := e.pool.Query(ctx, "SELECT seq, token FROM "+logT+" ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		var n, last, prevSeq int64
		for rows.Next() {
			var seq, tk int64
			if err := rows.Scan(&seq, &tk); err != nil {
				t.Fatal(err)
			}
			if seq != prevSeq+1 {
				t.Errorf("seq %d after %d", seq, prevSeq)
			}
			if tk < last {
				t.Errorf("violation: token %d committed after %d (seq %d)", tk, last, seq)
			}
			last, prevSeq = tk, seq
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != accepted.Load() || stale.Load() == 0 {
			t.Fatalf("%d rows, %d accepted, %d stale", n, accepted.Load(), stale.Load())
		}
		t.Logf("%d accepted, %d stale, violations 0", accepted.Load(), stale.Load())
	})
}
