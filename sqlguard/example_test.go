package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
	_ "modernc.org/sqlite"
)

// openExampleDB opens SQLite in a temporary file; the returned func closes
// it and removes the file.
func openExampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "sqlguard-example")
	if err != nil {
		panic(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		panic(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// Two holders of the lock "accounts" write the same row. The older one
// (revision 5) wakes up after the newer one (revision 9) has written, and
// the database refuses its transaction.
func Example() {
	ctx := context.Background()
	db, done := openExampleDB()
	defer done()

	g, err := sqlguard.Open(ctx, db) // detects SQLite
	if err != nil {
		panic(err)
	}
	if err := g.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`INSERT INTO accounts VALUES ('alice', 100)`); err != nil {
		panic(err)
	}

	deposit := func(tok fence.Token, amount int) error {
		return g.RunTx(ctx, db, nil, tok, []string{"account/alice"}, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ? WHERE id = 'alice'`, amount)
			return err
		})
	}

	newer := fence.Token{Lock: "accounts", Revision: 9}
	older := fence.Token{Lock: "accounts", Revision: 5}
	fmt.Println("newer:", deposit(newer, 10))

	err = deposit(older, 1000)
	var stale *fence.RefusedError
	if errors.As(err, &stale) {
		fmt.Printf("older: refused, %q is at revision %d\n", stale.Resource, stale.Mark.Revision)
	}
	fmt.Println("matches fence.ErrStale:", errors.Is(err, fence.ErrStale))

	var balance int
	if err := db.QueryRow(`SELECT balance FROM accounts WHERE id = 'alice'`).Scan(&balance); err != nil {
		panic(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// newer: <nil>
	// older: refused, "account/alice" is at revision 9
	// matches fence.ErrStale: true
	// balance: 110
}

// Row-column mode: the row carries its own fence column.
func ExampleGuard_Update() {
	ctx := context.Background()
	db, done := openExampleDB()
	defer done()

	g, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		panic(err)
	}
	if _, err := db.Exec(`CREATE TABLE jobs (id TEXT PRIMARY KEY, state TEXT, fence INTEGER NOT NULL DEFAULT 0)`); err != nil {
		panic(err)
	}
	if err := g.CheckColumn(ctx, db, "jobs", "fence"); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`INSERT INTO jobs (id, state) VALUES ('j1', 'queued')`); err != nil {
		panic(err)
	}
	set := func(rev int64, id, state string) error {
		_, err := g.Update(ctx, db, fence.Token{Lock: "scheduler", Revision: rev}, sqlguard.RowUpdate{
			Table:     "jobs",
			Set:       []sqlguard.Assign{{Column: "state", Value: state}},
			Where:     "id = ?",
			WhereArgs: []any{id},
		})
		return err
	}
	fmt.Println(set(7, "j1", "running"))
	fmt.Println(errors.Is(set(6, "j1", "failed"), fence.ErrStale))
	fmt.Println(errors.Is(set(8, "j2", "running"), sqlguard.ErrNoRow))
	// Output:
	// <nil>
	// true
	// true
}

// An idempotency key stops the same request from being applied twice,
// with an error of its own.
func ExampleGuard_Record() {
	ctx := context.Background()
	db, done := openExampleDB()
	defer done()

	g, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		panic(err)
	}
	if err := g.Migrate(ctx, db); err != nil {
		panic(err)
	}
	tok := fence.Token{Lock: "payments", Revision: 3}
	pay := func(requestID string) error {
		return g.RunTx(ctx, db, nil, tok, []string{"payments"}, func(ctx context.Context, tx *sql.Tx) error {
			// ... and the payment's writes, in the same transaction.
			return g.Record(ctx, tx, requestID)
		})
	}
	fmt.Println(pay("req-42"))
	err = pay("req-42")
	fmt.Println(errors.Is(err, sqlguard.ErrDuplicate), errors.Is(err, fence.ErrStale))
	// Output:
	// <nil>
	// true false
}

// Schema returns the DDL, for migration tools.
func ExampleGuard_Schema() {
	g, err := sqlguard.New(sqlguard.PostgreSQL)
	if err != nil {
		panic(err)
	}
	fmt.Println(g.Schema()[0])
	// Output:
	// CREATE TABLE IF NOT EXISTS "fence_tokens" (
	// 	resource TEXT PRIMARY KEY,
	// 	lock_key TEXT NOT NULL,
	// 	token BIGINT NOT NULL CHECK (token >= 0),
	// 	seq BIGINT NOT NULL DEFAULT 0
	// )
}

// Bind declares a resource's lock before any token fences it, so that a
// first token of another lock cannot bind the resource to its own lock.
func ExampleGuard_Bind() {
	ctx := context.Background()
	db, done := openExampleDB()
	defer done()

	g, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		panic(err)
	}
	if err := g.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if err := g.Bind(ctx, db, "account/alice", "accounts"); err != nil {
		panic(err)
	}
	wrong := fence.Token{Lock: "payments", Revision: 7}
	err = g.RunTx(ctx, db, nil, wrong, []string{"account/alice"}, nil)
	var wl *fence.RefusedError
	if errors.As(err, &wl) {
		fmt.Printf("refused: %q is bound to lock %q\n", wl.Resource, wl.Lock)
	}
	right := fence.Token{Lock: "accounts", Revision: 5}
	fmt.Println(g.RunTx(ctx, db, nil, right, []string{"account/alice"}, nil))
	// Output:
	// refused: "account/alice" is bound to lock "accounts"
	// <nil>
}

// A new etcd cluster starts revisions again: with WithCluster, marks of
// the old cluster refuse the new cluster's tokens with a *ClusterError,
// and an operator moves the mark to the new cluster with ResetMark.
func ExampleWithCluster() {
	ctx := context.Background()
	db, done := openExampleDB()
	defer done()

	// The cluster IDs come from etcd response headers (Header.ClusterId).
	old, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithCluster(0xcdf818194e3a8c32))
	if err != nil {
		panic(err)
	}
	if err := old.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if err := old.Claim(ctx, db, fence.Token{Lock: "accounts", Revision: 4012}, "account/alice"); err != nil {
		panic(err)
	}

	fresh, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithCluster(0x8e9e05c52164694d))
	if err != nil {
		panic(err)
	}
	tok := fence.Token{Lock: "accounts", Revision: 2} // the new cluster's first holder
	err = fresh.Claim(ctx, db, tok, "account/alice")
	var ce *fence.RefusedError
	if errors.As(err, &ce) {
		fmt.Printf("refused: %s, mark %d from another cluster: %t\n", ce.Outcome, ce.Mark.Revision, errors.Is(err, sqlguard.ErrOtherCluster))
	}
	// The operator's recovery, once the old cluster's holders are gone.
	if err := fresh.ResetMark(ctx, db, "account/alice", fence.Token{Lock: "accounts", Revision: 4012}, tok); err != nil {
		panic(err)
	}
	fmt.Println(fresh.Claim(ctx, db, tok, "account/alice"))
	// Output:
	// refused: mark_ahead, mark 4012 from another cluster: true
	// <nil>
}
