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

// TestCancelDuringLockWait: a Fence waiting on the row lock of a newer
// holder's open transaction returns the context's error when its ctx
// ends, and changes nothing; the holder's transaction commits.
func TestCancelDuringLockWait(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatal(err)
		}
		holder, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback(ctx)
		if err := e.g.Fence(ctx, holder, tok(7), "acct"); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err = e.g.RunTx(wctx, e.pool, pgx.TxOptions{}, tok(6), []string{"acct"}, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting Fence: got %v, want context.DeadlineExceeded", err)
		}
		if err := holder.Commit(ctx); err != nil {
			t.Fatalf("holder commit: %v", err)
		}
		if m := e.mark("acct"); m.Token != tok(7) || m.Seq != 2 {
			t.Fatalf("mark %+v, want 7 seq 2", m)
		}
	})
}
