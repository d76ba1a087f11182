package sqlguard_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
)

func acctTok(id string, rev int64) fence.Token { return fence.Token{Lock: "acct-" + id, Revision: rev} }

// TestRunTxAll: a transfer between two accounts, each bound to a lock of
// its own, fenced in one transaction by a set's two tokens; a refusal of
// either rolls back both.
func TestRunTxAll(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		bal := e.table("bal", "id KEY, amount BIGINT NOT NULL")
		for _, id := range []string{"1", "2"} {
			if _, err := e.db.Exec("INSERT INTO "+bal+" (id, amount) VALUES ("+e.ph(1)+", 100)", id); err != nil {
				t.Fatal(err)
			}
		}
		amount := func(id string) int64 {
			t.Helper()
			var n int64
			if err := e.db.QueryRow("SELECT amount FROM "+bal+" WHERE id = "+e.ph(1), id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		ran := 0
		transfer := func(set map[string]fence.Token) error {
			return e.g.RunTxAll(ctx, e.db, nil, set, func(ctx context.Context, tx *testTx) error {
				ran++
				for id, d := range map[string]int{"1": -10, "2": 10} {
					if _, err := tx.ExecContext(ctx, "UPDATE "+bal+" SET amount = amount + "+e.ph(1)+" WHERE id = "+e.ph(2), d, id); err != nil {
						return err
					}
				}
				return nil
			})
		}
		set10 := map[string]fence.Token{"acct/1": acctTok("1", 10), "acct/2": acctTok("2", 10)}
		if err := transfer(set10); err != nil {
			t.Fatalf("transfer with set 10: %v", err)
		}
		if m1, m2 := e.mark("acct/1"), e.mark("acct/2"); m1.Token != acctTok("1", 10) || m2.Token != acctTok("2", 10) || m1.Seq != 1 || m2.Seq != 1 {
			t.Fatalf("marks %+v, %+v; want 10 on each lock, seq 1", m1, m2)
		}
		// A newer holder of account 2's lock alone: the set's next transfer is
		// refused at acct/2, the second resource fenced, and rolls back the
		// first one's advance and every write.
		if err := e.g.RunTx(ctx, e.db, nil, acctTok("2", 11), []string{"acct/2"}, nil); err != nil {
			t.Fatal(err)
		}
		ran = 0
		err := transfer(set10)
		var r *fence.RefusedError
		if !errors.Is(err, fence.ErrStale) || !errors.As(err, &r) || r.Resource != "acct/2" || r.Token != acctTok("2", 10) || r.Mark != acctTok("2", 11) {
			t.Fatalf("transfer after acct-2 moved on: %v, want stale at acct/2", err)
		}
		if ran != 0 || amount("1") != 90 || amount("2") != 110 {
			t.Fatalf("refused transfer: fn ran %d times, balances %d/%d; want 0 and 90/110", ran, amount("1"), amount("2"))
		}
		if m := e.mark("acct/1"); m.Token != acctTok("1", 10) || m.Seq != 1 {
			t.Fatalf("mark of acct/1 %+v, want unchanged 10/1 (rolled back)", m)
		}
		// A token of another lock for a resource: wrong lock.
		err = transfer(map[string]fence.Token{"acct/1": acctTok("1", 12), "acct/2": acctTok("1", 12)})
		if !errors.Is(err, fence.ErrWrongLock) || !errors.As(err, &r) || r.Resource != "acct/2" || r.Lock != "acct-2" {
			t.Fatalf("acct/2 with acct-1's token: %v, want wrong lock at acct/2", err)
		}
		if m := e.mark("acct/1"); m.Token != acctTok("1", 10) {
			t.Fatalf("mark of acct/1 %+v, want unchanged 10", m)
		}
		// A newer set passes both.
		if err := transfer(map[string]fence.Token{"acct/1": acctTok("1", 12), "acct/2": acctTok("2", 12)}); err != nil {
			t.Fatalf("transfer with set 12: %v", err)
		}
		if amount("1") != 80 || amount("2") != 120 {
			t.Fatalf("balances %d/%d, want 80/120", amount("1"), amount("2"))
		}

		// FenceAll in the caller's transaction.
		tx := e.begin(ctx)
		if err := e.g.FenceAll(ctx, tx, map[string]fence.Token{"acct/1": acctTok("1", 13), "acct/2": acctTok("2", 12), "acct/3": acctTok("3", 13)}); err != nil {
			t.Fatalf("FenceAll: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		want := map[string]sqlguard.Mark{"acct/1": {Token: acctTok("1", 13), Seq: 3}, "acct/2": {Token: acctTok("2", 12), Seq: 4}, "acct/3": {Token: acctTok("3", 13), Seq: 1}}
		for r, w := range want {
			if m := e.mark(r); m.Token != w.Token || m.Seq != w.Seq {
				t.Errorf("mark of %s %+v, want %v seq %d", r, m, w.Token, w.Seq)
			}
		}
		tx = e.begin(ctx)
		err = e.g.FenceAll(ctx, tx, map[string]fence.Token{"acct/1": acctTok("1", 12), "acct/2": acctTok("2", 13)})
		if rerr := tx.Rollback(); rerr != nil {
			t.Fatal(rerr)
		}
		if !errors.Is(err, fence.ErrStale) || !errors.As(err, &r) || r.Resource != "acct/1" {
			t.Fatalf("FenceAll with a stale acct/1: %v", err)
		}
		if m := e.mark("acct/2"); m.Token != acctTok("2", 12) {
			t.Fatalf("mark of acct/2 %+v after a refused FenceAll", m)
		}
		if err := e.g.FenceAll(ctx, e.db, map[string]fence.Token{"acct/1": acctTok("1", 14)}); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Fatalf("FenceAll on a pool: %v, want ErrNeedTx", err)
		}
	})
}

// TestFenceAllValidationBeforeSQL: bad arguments are refused before any
// statement.
func TestFenceAllValidationBeforeSQL(t *testing.T) {
	g, err := sqlguard.New(sqlguard.PostgreSQL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, fences := range map[string]map[string]fence.Token{
		"nil":             nil,
		"empty":           {},
		"zero revision":   {"a": acctTok("1", 1), "b": acctTok("2", 0)},
		"min int64":       {"a": acctTok("1", math.MinInt64)},
		"invalid lock":    {"a": {Lock: "a\x00", Revision: 1}},
		"empty resource":  {"": acctTok("1", 1)},
		"long resource":   {string(make([]byte, 256)): acctTok("1", 1)},
		"resource is NUL": {"a\x00": acctTok("1", 1)},
	} {
		if err := g.FenceAll(ctx, noSQL{t}, fences); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Errorf("FenceAll %s: %v, want ErrInvalid", name, err)
		}
		if err := g.RunTxAll(ctx, nil, nil, fences, nil); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Errorf("RunTxAll %s: %v, want ErrInvalid", name, err)
		}
	}
	if err := g.RunTxAll(ctx, nil, nil, map[string]fence.Token{"a": acctTok("1", 1)}, nil); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Errorf("RunTxAll with a nil Beginner: %v, want ErrInvalid", err)
	}
}
