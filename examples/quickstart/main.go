// Command quickstart runs the fencekit story end to end on an embedded etcd
// in a temporary directory: two workers take turns holding a lease on an
// account; the first pauses past its TTL; the second takes over; when the
// first wakes, its release is refused (not owner) and its late writes are
// refused: by the in-memory account's guard, and by the database itself for
// the account's row in SQLite (sqlguard). It prints what happened, exits 0,
// and leaves nothing behind.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	_ "modernc.org/sqlite"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// account is the protected resource: a balance that only the current
// lease holder may change.
type account struct {
	mu      sync.Mutex
	balance int
	history []string
}

func (a *account) add(who string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.balance += n
	a.history = append(a.history, fmt.Sprintf("%s%+d", who, n))
}

func run() error {
	dir, err := os.MkdirTemp("", "fencekit-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	etcd, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: dir})
	if err != nil {
		return err
	}
	defer etcd.Close()
	fmt.Println("embedded etcd up at", etcd.Members()[0].ClientURL())

	// Worker A reaches etcd through a proxy we can pause, to play a
	// process frozen by a long GC pause or a stopped VM.
	proxy, err := etcd.NewProxy(etcd.Members()[0])
	if err != nil {
		return err
	}
	defer proxy.Close()
	cliA, err := etcd.NewClientThrough(proxy)
	if err != nil {
		return err
	}
	defer cliA.Close()
	cliB, err := etcd.NewClient()
	if err != nil {
		return err
	}
	defer cliB.Close()

	workerA, err := lease.New(cliA, lease.WithTTL(time.Second), lease.WithInstanceID("worker-a"))
	if err != nil {
		return err
	}
	defer workerA.Close()
	workerB, err := lease.New(cliB, lease.WithTTL(time.Second), lease.WithInstanceID("worker-b"))
	if err != nil {
		return err
	}
	defer workerB.Close()

	// The account keeps the highest fencing token it accepted and refuses
	// older ones.
	acct := &account{}
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		return err
	}
	target := guard.Target{Resource: "account-42", Lock: "account-42"}
	write := func(who string, tok fence.Token, n int) error {
		return g.Do(ctx, target, tok, func(context.Context) error {
			acct.add(who, n)
			return nil
		})
	}

	// The same account as a SQLite row carrying a fence column: the
	// database refuses an UPDATE whose token is older than the row's.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "bank.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (
		id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (42, 0)`); err != nil {
		return err
	}
	sg, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		return err
	}
	if err := sg.CheckColumn(ctx, db, "accounts", "fence"); err != nil {
		return err
	}
	setBalance := func(tok fence.Token, balance int) error {
		_, err := sg.Update(ctx, db, tok, sqlguard.RowUpdate{
			Table: "accounts", Column: "fence",
			Set:   []sqlguard.Assign{{Column: "balance", Value: balance}},
			Where: "id = ?", WhereArgs: []any{42}, Single: true,
		})
		return err
	}

	// 1. A takes the lease and writes.
	a, err := workerA.Acquire(ctx, "account-42")
	if err != nil {
		return err
	}
	fmt.Printf("A acquired %s with fencing token %d\n", a.Name(), a.Fence().Revision)
	if err := write("A", a.Fence(), 100); err != nil {
		return err
	}
	if err := setBalance(a.Fence(), 100); err != nil {
		return err
	}
	fmt.Println("A wrote +100: accepted (memory and SQLite)")

	// 2. A freezes: no more renewals reach etcd.
	proxy.Pause()
	fmt.Println("A pauses (no renewals reach etcd)")
	<-a.Done()
	aLost := time.Now()
	fmt.Println("A's Done closed:", errors.Is(a.Err(), lease.ErrDeadline), "(validity deadline passed)")

	// 3. B acquires once the server expires A's session.
	b, err := workerB.Acquire(ctx, "account-42")
	if err != nil {
		return err
	}
	fmt.Printf("B acquired %s with fencing token %d (A's Done closed %v earlier)\n",
		b.Name(), b.Fence().Revision, time.Since(aLost).Round(10*time.Millisecond))
	if err := write("B", b.Fence(), 50); err != nil {
		return err
	}
	if err := setBalance(b.Fence(), 150); err != nil {
		return err
	}
	fmt.Println("B wrote +50: accepted (memory and SQLite)")

	// 4. A wakes up and carries on as if nothing happened.
	proxy.Resume()
	err = write("A", a.Fence(), -100)
	var rej *fence.RefusedError
	if !errors.As(err, &rej) || !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("worker A's late write was not refused as stale: %v", err)
	}
	fmt.Printf("A's late write -100 refused: token %d is older than the account's mark %d\n",
		rej.Token.Revision, rej.Mark.Revision)

	err = setBalance(a.Fence(), 0)
	var stale *fence.RefusedError
	if !errors.As(err, &stale) {
		return fmt.Errorf("worker A's late UPDATE was not refused by the database: %v", err)
	}
	fmt.Printf("A's late UPDATE refused by SQLite: token %d is older than the row's fence %d\n",
		stale.Token.Revision, stale.Mark.Revision)

	err = retryUnknown(ctx, a.Release)
	if !errors.Is(err, lease.ErrNotOwner) {
		return fmt.Errorf("worker A's stale release: want not owner, got %v", err)
	}
	fmt.Println("A's release: not owner (B holds the lock; nothing of B's was touched)")

	// 5. B finishes; now nobody holds it.
	if err := b.Release(ctx); err != nil {
		return err
	}
	fmt.Println("B released")
	if err := retryUnknown(ctx, a.Release); !errors.Is(err, lease.ErrNotFound) {
		return fmt.Errorf("worker A's release after B: want not found, got %v", err)
	}
	fmt.Println("A's release again: not found (nobody holds it)")

	acct.mu.Lock()
	defer acct.mu.Unlock()
	fmt.Printf("account balance %d, writes applied: %s\n", acct.balance, strings.Join(acct.history, " "))
	if acct.balance != 150 {
		return fmt.Errorf("balance %d, want 150", acct.balance)
	}
	var row int
	if err := db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 42`).Scan(&row); err != nil {
		return err
	}
	fmt.Printf("SQLite row balance %d (B's write intact)\n", row)
	if row != 150 {
		return fmt.Errorf("row balance %d, want 150", row)
	}
	return nil
}

// retryUnknown retries op while its outcome is unknown (A's connection is
// recovering from the pause), which the lease API documents as safe.
func retryUnknown(ctx context.Context, op func(context.Context) error) error {
	for {
		err := op(ctx)
		if err == nil || errors.Is(err, lease.ErrNotOwner) || errors.Is(err, lease.ErrNotFound) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
