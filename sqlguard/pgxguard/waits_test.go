package pgxguard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/sqlguard"
	"github.com/jackc/pgx/v5"
)

// blockedFor is how long a transaction must stay blocked before a test
// believes it waits on a lock.
const blockedFor = 250 * time.Millisecond

// holder begins a transaction that fences resource with tk and keeps it
// open.
func (e *env) holder(tk int64, resource string) pgx.Tx {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.g.Fence(ctx, tx, tok(tk), resource); err != nil {
		e.t.Fatalf("holder %d: %v", tk, err)
	}
	return tx
}

// goRunTx runs a fenced RunTx in a goroutine and reports its result.
func (e *env) goRunTx(tk int64, resources ...string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ch <- e.g.RunTx(context.Background(), e.pool, pgx.TxOptions{}, tok(tk), resources, nil)
	}()
	return ch
}

func mustBlock(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("did not wait for the holder's lock: %v", err)
	case <-time.After(blockedFor):
	}
}

func result(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("blocked transaction never finished")
		return nil
	}
}

// An older token waits for a newer holder's open transaction and is
// stale once it commits; a newer one waiting on an older holder passes;
// a newer holder that rolls back lets the older one through.
func TestLockWaits(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		h := e.holder(7, "acct")
		ch := e.goRunTx(5, "acct")
		mustBlock(t, ch)
		if err := h.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := result(t, ch); !errors.Is(err, sqlguard.ErrStale) {
			t.Fatalf("older after newer committed: got %v, want ErrStale", err)
		}

		h = e.holder(7, "other")
		ch = e.goRunTx(9, "other")
		mustBlock(t, ch)
		if err := h.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := result(t, ch); err != nil {
			t.Fatalf("newer after older committed: %v", err)
		}

		h = e.holder(12, "other")
		ch = e.goRunTx(10, "other")
		mustBlock(t, ch)
		if err := h.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := result(t, ch); err != nil {
			t.Fatalf("older after newer rolled back: %v", err)
		}
		if m := e.mark("other"); m.Token.Revision != 10 || m.Seq != 3 {
			t.Fatalf("mark %+v, want 10 seq 3", m)
		}
	})
}

// Many Claims race to create a brand-new mark, and transactions fence
// overlapping sets in opposite orders: no duplicate-key error, no
// deadlock, the highest accepted token holds the mark.
func TestRaces(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const n = 6
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = e.g.Claim(ctx, e.pool, tok(int64(10+i)), "fresh")
			})
		}
		close(start)
		wg.Wait()
		best := int64(0)
		for i, err := range errs {
			switch {
			case err == nil:
				best = max(best, int64(10+i))
			case !errors.Is(err, sqlguard.ErrStale):
				t.Errorf("claim %d: %v", 10+i, err)
			}
		}
		if m := e.mark("fresh"); m.Token.Revision != best || best == 0 {
			t.Fatalf("mark %+v, highest accepted %d", m, best)
		}

		orders := [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "a"}, {"c", "a"}}
		clear(errs)
		for i := range 4 {
			wg.Go(func() {
				for range 10 {
					err := e.g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(5), orders[i], func(ctx context.Context, tx pgx.Tx) error {
						time.Sleep(time.Millisecond)
						return nil
					})
					if err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs[:4] {
			if err != nil {
				t.Errorf("order %v: %v", orders[i], err)
			}
		}
	})
}

// A concurrent Record of the same key waits for the first transaction:
// duplicate when it commits, recorded when it rolls back.
func TestRecordWaits(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, commit := range []bool{true, false} {
			key := "req-commit"
			if !commit {
				key = "req-rollback"
			}
			first, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.g.Record(ctx, first, key); err != nil {
				t.Fatal(err)
			}
			ch := make(chan error, 1)
			go func() {
				ch <- e.g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(5), []string{"acct"}, func(ctx context.Context, tx pgx.Tx) error {
					return e.g.Record(ctx, tx, key)
				})
			}()
			mustBlock(t, ch)
			if commit {
				err = first.Commit(ctx)
			} else {
				err = first.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			err = result(t, ch)
			if commit && !errors.Is(err, sqlguard.ErrDuplicate) {
				t.Fatalf("after the first committed: got %v, want ErrDuplicate", err)
			}
			if !commit && err != nil {
				t.Fatalf("after the first rolled back: %v", err)
			}
		}
	})
}

// CheckSchema refuses an unsafe fence table through pgx too.
func TestCheckSchemaUnsafe(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		bad := e.table("bad", "resource TEXT PRIMARY KEY, lock_key TEXT NOT NULL, token TEXT NOT NULL, seq BIGINT NOT NULL")
		g := e.guard(sqlguard.WithTable(bad))
		var se *sqlguard.SchemaError
		if err := g.CheckSchema(ctx, e.pool); !errors.As(err, &se) || se.Column != "token" {
			t.Fatalf("CheckSchema of a TEXT token column: got %v", err)
		}
		if err := g.Migrate(ctx, e.pool); !errors.Is(err, sqlguard.ErrUnsafeSchema) {
			t.Fatalf("Migrate over an unsafe table: got %v", err)
		}
	})
}
