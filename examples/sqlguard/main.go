// Command sqlguard shows a database refusing the write of a lease holder
// that was superseded. Two workers share an account row. Worker A holds the
// lease "accounts" and writes; then its link to etcd goes silent (standing
// in for a long GC pause or a partition), its lease expires and Done fires.
// Worker B acquires the lease and writes. A wakes up and sends its write
// with its old fencing token: the database itself refuses it.
//
//	go run ./examples/sqlguard                       # SQLite in a temp file
//	go run ./examples/sqlguard -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//	go run ./examples/sqlguard -pgx -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// With -pgx the workers write through pgx natively (a *pgxpool.Pool and
// package sqlguard/pgxguard) instead of database/sql.
//
// etcd is embedded and runs in a temporary directory. The program exits 0
// when every step happened as printed and leaves nothing behind: the
// temporary directory is removed and, on PostgreSQL, its uniquely named
// tables are dropped.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/faults"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

func main() {
	dsn := flag.String("dsn", "", "PostgreSQL DSN (pgx); empty: SQLite in a temporary file")
	usePgx := flag.Bool("pgx", false, "write through pgx natively (pgxpool and sqlguard/pgxguard); needs -dsn")
	flag.Parse()
	if *usePgx && *dsn == "" {
		log.Fatal("-pgx needs -dsn")
	}
	if err := run(*dsn, *usePgx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// story is the example's cast: the database and its Guard (and, with
// -pgx, the same Guard through pgx), and two workers whose lease clients
// reach etcd, worker A's through a proxy we can pause.
type story struct {
	out                        io.Writer
	db                         *sql.DB
	fences, requests, accounts string // table names, unique to this run
	g                          *sqlguard.Guard
	pool                       *pgxpool.Pool   // with -pgx
	pg                         *pgxguard.Guard // with -pgx
	proxy                      *faults.Proxy
	locksA, locksB             *lease.Client
	a, b                       *lease.Lease
	cleanups                   []func()
}

// onCleanup registers f to run at cleanup, after those registered later.
func (s *story) onCleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// cleanup runs the registered functions, the last first.
func (s *story) cleanup() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

func run(dsn string, usePgx bool, out io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "fencekit-sqlguard-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s := &story{out: out}
	defer s.cleanup()
	if err := s.openDB(dsn, dir); err != nil {
		return err
	}
	defer func() {
		if derr := s.dropTables(); derr != nil && err == nil {
			err = derr
		}
	}()
	if err := s.createTables(ctx); err != nil {
		return err
	}
	if usePgx {
		if err := s.throughPgx(ctx, dsn); err != nil {
			return err
		}
	}
	if err := s.startWorkers(ctx, dir); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{
		s.aDeposits, s.aStalls, s.bDeposits, s.aDepositsLate, s.checkAccount,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// openDB opens the database: PostgreSQL at dsn, or SQLite in dir. The
// tables get names of their own, so that runs do not meet.
func (s *story) openDB(dsn, dir string) error {
	var err error
	if dsn != "" {
		s.db, err = sql.Open("pgx", dsn)
	} else {
		s.db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
			"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	}
	if err != nil {
		return err
	}
	s.onCleanup(func() { s.db.Close() })
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	prefix := "sqlguard_example_" + hex.EncodeToString(b[:]) + "_"
	s.fences, s.requests, s.accounts = prefix+"fence", prefix+"req", prefix+"accounts"
	return nil
}

// dropTables drops the run's tables.
func (s *story) dropTables() error {
	var err error
	for _, t := range []string{s.fences, s.requests, s.accounts} {
		if _, derr := s.db.Exec("DROP TABLE IF EXISTS " + t); derr != nil && err == nil {
			err = derr
		}
	}
	return err
}

// createTables opens the Guard, creates its tables and the accounts.
func (s *story) createTables(ctx context.Context) error {
	var err error
	s.g, err = sqlguard.Open(ctx, s.db, sqlguard.WithTable(s.fences), sqlguard.WithRequestTable(s.requests))
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "database: %v\n", s.g.Dialect())
	if err := s.g.Migrate(ctx, s.db); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE "+s.accounts+" (id TEXT PRIMARY KEY, owner TEXT NOT NULL, balance BIGINT NOT NULL)"); err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, "INSERT INTO "+s.accounts+" (id, owner, balance) VALUES ('alice', 'nobody', 100)")
	return err
}

// throughPgx makes the workers write with the same Guard through pgx's
// own pool and types.
func (s *story) throughPgx(ctx context.Context, dsn string) error {
	var err error
	if s.pool, err = pgxpool.New(ctx, dsn); err != nil {
		return err
	}
	s.onCleanup(s.pool.Close)
	if s.pg, err = pgxguard.Wrap(s.g); err != nil {
		return err
	}
	fmt.Fprintln(s.out, "writes through pgx (pgxguard)")
	return nil
}

// ph returns the i-th placeholder: they differ between the dialects.
func (s *story) ph(i int) string {
	if s.g.Dialect() == sqlguard.PostgreSQL {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// deposit is a worker's critical section: fence the account, then write,
// in one transaction.
func (s *story) deposit(ctx context.Context, l *lease.Lease, who string, amount int) error {
	if s.pg != nil {
		return s.pg.RunTx(ctx, s.pool, pgx.TxOptions{}, l.Fence(), []string{"account/alice"}, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+s.accounts+" SET owner = $1, balance = balance + $2 WHERE id = 'alice'", who, amount)
			return err
		})
	}
	return s.g.RunTx(ctx, s.db, nil, l.Fence(), []string{"account/alice"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE "+s.accounts+" SET owner = "+s.ph(1)+", balance = balance + "+s.ph(2)+
			" WHERE id = 'alice'", who, amount)
		return err
	})
}

// startWorkers starts etcd in dir, and the workers' lease clients; worker
// A's connection goes through a proxy we can pause.
func (s *story) startWorkers(ctx context.Context, dir string) error {
	etcd, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return err
	}
	s.onCleanup(func() { etcd.Close() })
	if s.proxy, err = etcd.NewProxy(etcd.Members()[0]); err != nil {
		return err
	}
	s.onCleanup(func() { s.proxy.Close() })
	cliA, err := etcd.NewClientThrough(s.proxy)
	if err != nil {
		return err
	}
	s.onCleanup(func() { cliA.Close() })
	cliB, err := etcd.NewClient()
	if err != nil {
		return err
	}
	s.onCleanup(func() { cliB.Close() })
	if s.locksA, err = lease.New(cliA, lease.WithTTL(time.Second)); err != nil {
		return err
	}
	s.onCleanup(func() { s.locksA.Close() })
	if s.locksB, err = lease.New(cliB, lease.WithTTL(time.Second)); err != nil {
		return err
	}
	s.onCleanup(func() { s.locksB.Close() })
	return nil
}

// A holds the lease and deposits.
func (s *story) aDeposits(ctx context.Context) error {
	var err error
	if s.a, err = s.locksA.Acquire(ctx, "accounts"); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "A holds the lease, fencing token %d\n", s.a.Fence().Revision)
	if err := s.deposit(ctx, s.a, "A", 1); err != nil {
		return fmt.Errorf("first deposit of A: %w", err)
	}
	fmt.Fprintln(s.out, "A deposits 1: committed")
	return nil
}

// A stalls: no renewals reach etcd, and its lease is lost.
func (s *story) aStalls(ctx context.Context) error {
	s.proxy.Pause()
	select {
	case <-s.a.Done():
		fmt.Fprintln(s.out, "A's lease is lost (Done fired)")
		return nil
	case <-ctx.Done():
		return errors.New("lease of A was never lost")
	}
}

// B takes the lease over and deposits.
func (s *story) bDeposits(ctx context.Context) error {
	var err error
	if s.b, err = s.locksB.Acquire(ctx, "accounts"); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "B holds the lease, fencing token %d\n", s.b.Fence().Revision)
	if err := s.deposit(ctx, s.b, "B", 10); err != nil {
		return fmt.Errorf("deposit of B: %w", err)
	}
	fmt.Fprintln(s.out, "B deposits 10: committed")
	return nil
}

// A wakes up, unaware, and writes with its old token.
func (s *story) aDepositsLate(ctx context.Context) error {
	err := s.deposit(ctx, s.a, "A", 1000)
	var stale *fence.RefusedError
	if !errors.As(err, &stale) {
		return fmt.Errorf("late deposit of A was not refused as stale: %v", err)
	}
	fmt.Fprintf(s.out, "A deposits 1000 late: refused by the database: token %d < mark %d\n",
		stale.Token.Revision, stale.Mark.Revision)
	return nil
}

// checkAccount shows the account as B left it, and ends the story.
func (s *story) checkAccount(ctx context.Context) error {
	var owner string
	var balance int64
	if err := s.db.QueryRowContext(ctx, "SELECT owner, balance FROM "+s.accounts+" WHERE id = 'alice'").Scan(&owner, &balance); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "account: last written by %s, balance %d\n", owner, balance)
	if owner != "B" || balance != 111 {
		return fmt.Errorf("account is %s/%d, want B/111", owner, balance)
	}
	if err := s.b.Release(ctx); err != nil {
		return fmt.Errorf("release of B: %w", err)
	}
	s.proxy.Resume()
	return nil
}
