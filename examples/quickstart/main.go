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
	"github.com/fencekit/fencekit/integration/faults"
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

// story is the example's cast: two workers, each with its own etcd client,
// and the account, kept in memory behind a guard and as a SQLite row.
type story struct {
	proxy            *faults.Proxy // worker A's link to etcd
	workerA, workerB *lease.Client
	a, b             *lease.Lease
	acct             *account
	g                *guard.Guard
	db               *sql.DB
	sg               *sqlguard.Guard
	aLost            time.Time
	cleanups         []func()
}

// onCleanup registers f to run at cleanup, after those registered later.
func (s *story) onCleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// cleanup runs the registered functions, the last first.
func (s *story) cleanup() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
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

	s := &story{acct: &account{}}
	defer s.cleanup()
	if err := s.startWorkers(etcd); err != nil {
		return err
	}
	if err := s.openAccount(ctx, dir); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{
		s.aWrites, s.aFreezes, s.bTakesOver, s.aWakesLate, s.bReleases, s.checkBalance,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// startWorkers starts the workers' lease clients. Worker A reaches etcd
// through a proxy we can pause, to play a process frozen by a long GC
// pause or a stopped VM.
func (s *story) startWorkers(etcd *etcdtest.Cluster) error {
	proxy, err := etcd.NewProxy(etcd.Members()[0])
	if err != nil {
		return err
	}
	s.onCleanup(func() { proxy.Close() })
	s.proxy = proxy
	cliA, err := etcd.NewClientThrough(proxy)
	if err != nil {
		return err
	}
	s.onCleanup(func() { cliA.Close() })
	cliB, err := etcd.NewClient()
	if err != nil {
		return err
	}
	s.onCleanup(func() { cliB.Close() })
	if s.workerA, err = lease.New(cliA, lease.WithTTL(time.Second), lease.WithInstanceID("worker-a")); err != nil {
		return err
	}
	s.onCleanup(func() { s.workerA.Close() })
	if s.workerB, err = lease.New(cliB, lease.WithTTL(time.Second), lease.WithInstanceID("worker-b")); err != nil {
		return err
	}
	s.onCleanup(func() { s.workerB.Close() })
	return nil
}

// openAccount sets the account up twice: in memory behind a guard, which
// keeps the highest fencing token it accepted and refuses older ones; and
// as a SQLite row carrying a fence column, where the database refuses an
// UPDATE whose token is older than the row's.
func (s *story) openAccount(ctx context.Context, dir string) error {
	var err error
	if s.g, err = guard.New(guard.NewMemoryStore()); err != nil {
		return err
	}
	s.db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "bank.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	s.onCleanup(func() { s.db.Close() })
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE accounts (
		id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (42, 0)`); err != nil {
		return err
	}
	if s.sg, err = sqlguard.New(sqlguard.SQLite); err != nil {
		return err
	}
	return s.sg.CheckColumn(ctx, s.db, "accounts", "fence")
}

// write adds n to the account in memory, through the guard.
func (s *story) write(ctx context.Context, who string, tok fence.Token, n int) error {
	target := guard.Target{Resource: "account-42", Lock: "account-42"}
	return s.g.Do(ctx, target, tok, func(context.Context) error {
		s.acct.add(who, n)
		return nil
	})
}

// setBalance sets the SQLite row's balance, fenced by its fence column.
func (s *story) setBalance(ctx context.Context, tok fence.Token, balance int) error {
	_, err := s.sg.Update(ctx, s.db, tok, sqlguard.RowUpdate{
		Table: "accounts", Column: "fence",
		Set:   []sqlguard.Assign{{Column: "balance", Value: balance}},
		Where: "id = ?", WhereArgs: []any{42}, Single: true,
	})
	return err
}

// 1. A takes the lease and writes.
func (s *story) aWrites(ctx context.Context) error {
	var err error
	if s.a, err = s.workerA.Acquire(ctx, "account-42"); err != nil {
		return err
	}
	fmt.Printf("A acquired %s with fencing token %d\n", s.a.Name(), s.a.Fence().Revision)
	if err := s.write(ctx, "A", s.a.Fence(), 100); err != nil {
		return err
	}
	if err := s.setBalance(ctx, s.a.Fence(), 100); err != nil {
		return err
	}
	fmt.Println("A wrote +100: accepted (memory and SQLite)")
	return nil
}

// 2. A freezes: no more renewals reach etcd.
func (s *story) aFreezes(context.Context) error {
	s.proxy.Pause()
	fmt.Println("A pauses (no renewals reach etcd)")
	<-s.a.Done()
	s.aLost = time.Now()
	fmt.Println("A's Done closed:", errors.Is(s.a.Err(), lease.ErrDeadline), "(validity deadline passed)")
	return nil
}

// 3. B acquires once the server expires A's session.
func (s *story) bTakesOver(ctx context.Context) error {
	var err error
	if s.b, err = s.workerB.Acquire(ctx, "account-42"); err != nil {
		return err
	}
	fmt.Printf("B acquired %s with fencing token %d (A's Done closed %v earlier)\n",
		s.b.Name(), s.b.Fence().Revision, time.Since(s.aLost).Round(10*time.Millisecond))
	if err := s.write(ctx, "B", s.b.Fence(), 50); err != nil {
		return err
	}
	if err := s.setBalance(ctx, s.b.Fence(), 150); err != nil {
		return err
	}
	fmt.Println("B wrote +50: accepted (memory and SQLite)")
	return nil
}

// 4. A wakes up and carries on as if nothing happened.
func (s *story) aWakesLate(ctx context.Context) error {
	s.proxy.Resume()
	err := s.write(ctx, "A", s.a.Fence(), -100)
	var rej *fence.RefusedError
	if !errors.As(err, &rej) || !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("worker A's late write was not refused as stale: %v", err)
	}
	fmt.Printf("A's late write -100 refused: token %d is older than the account's mark %d\n",
		rej.Token.Revision, rej.Mark.Revision)

	err = s.setBalance(ctx, s.a.Fence(), 0)
	var stale *fence.RefusedError
	if !errors.As(err, &stale) {
		return fmt.Errorf("worker A's late UPDATE was not refused by the database: %v", err)
	}
	fmt.Printf("A's late UPDATE refused by SQLite: token %d is older than the row's fence %d\n",
		stale.Token.Revision, stale.Mark.Revision)

	err = retryUnknown(ctx, s.a.Release)
	if !errors.Is(err, lease.ErrNotOwner) {
		return fmt.Errorf("worker A's stale release: want not owner, got %v", err)
	}
	fmt.Println("A's release: not owner (B holds the lock; nothing of B's was touched)")
	return nil
}

// 5. B finishes; now nobody holds it.
func (s *story) bReleases(ctx context.Context) error {
	if err := s.b.Release(ctx); err != nil {
		return err
	}
	fmt.Println("B released")
	if err := retryUnknown(ctx, s.a.Release); !errors.Is(err, lease.ErrNotFound) {
		return fmt.Errorf("worker A's release after B: want not found, got %v", err)
	}
	fmt.Println("A's release again: not found (nobody holds it)")
	return nil
}

// checkBalance prints both copies of the account: B's writes, intact.
func (s *story) checkBalance(ctx context.Context) error {
	s.acct.mu.Lock()
	defer s.acct.mu.Unlock()
	fmt.Printf("account balance %d, writes applied: %s\n", s.acct.balance, strings.Join(s.acct.history, " "))
	if s.acct.balance != 150 {
		return fmt.Errorf("balance %d, want 150", s.acct.balance)
	}
	var row int
	if err := s.db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 42`).Scan(&row); err != nil {
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
