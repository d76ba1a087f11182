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

func run(dsn string, usePgx bool, out io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "fencekit-sqlguard-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The database.
	var db *sql.DB
	if dsn != "" {
		db, err = sql.Open("pgx", dsn)
	} else {
		db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
			"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	}
	if err != nil {
		return err
	}
	defer db.Close()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	prefix := "sqlguard_example_" + hex.EncodeToString(b[:]) + "_"
	fences, requests, accounts := prefix+"fence", prefix+"req", prefix+"accounts"
	defer func() {
		for _, t := range []string{fences, requests, accounts} {
			if _, derr := db.Exec("DROP TABLE IF EXISTS " + t); derr != nil && err == nil {
				err = derr
			}
		}
	}()

	g, err := sqlguard.Open(ctx, db, sqlguard.WithTable(fences), sqlguard.WithRequestTable(requests))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "database: %v\n", g.Dialect())
	if err := g.Migrate(ctx, db); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+accounts+" (id TEXT PRIMARY KEY, owner TEXT NOT NULL, balance BIGINT NOT NULL)"); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+accounts+" (id, owner, balance) VALUES ('alice', 'nobody', 100)"); err != nil {
		return err
	}
	// With -pgx, the same Guard through pgx's own pool and types.
	var pool *pgxpool.Pool
	var pg *pgxguard.Guard
	if usePgx {
		if pool, err = pgxpool.New(ctx, dsn); err != nil {
			return err
		}
		defer pool.Close()
		if pg, err = pgxguard.Wrap(g); err != nil {
			return err
		}
		fmt.Fprintln(out, "writes through pgx (pgxguard)")
	}
	ph := func(i int) string { // placeholders differ between the dialects
		if g.Dialect() == sqlguard.PostgreSQL {
			return fmt.Sprintf("$%d", i)
		}
		return "?"
	}
	// deposit is a worker's critical section: fence the account, then write,
	// in one transaction.
	deposit := func(l *lease.Lease, who string, amount int) error {
		if usePgx {
			return pg.RunTx(ctx, pool, pgx.TxOptions{}, l.Fence(), []string{"account/alice"}, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "UPDATE "+accounts+" SET owner = $1, balance = balance + $2 WHERE id = 'alice'", who, amount)
				return err
			})
		}
		return g.RunTx(ctx, db, nil, l.Fence(), []string{"account/alice"}, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE "+accounts+" SET owner = "+ph(1)+", balance = balance + "+ph(2)+
				" WHERE id = 'alice'", who, amount)
			return err
		})
	}

	// etcd, and worker A's connection to it through a proxy we can pause.
	etcd, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return err
	}
	defer etcd.Close()
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
	locksA, err := lease.New(cliA, lease.WithTTL(time.Second))
	if err != nil {
		return err
	}
	defer locksA.Close()
	locksB, err := lease.New(cliB, lease.WithTTL(time.Second))
	if err != nil {
		return err
	}
	defer locksB.Close()

	a, err := locksA.Acquire(ctx, "accounts")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "A holds the lease, fencing token %d\n", a.Fence().Revision)
	if err := deposit(a, "A", 1); err != nil {
		return fmt.Errorf("first deposit of A: %w", err)
	}
	fmt.Fprintln(out, "A deposits 1: committed")

	proxy.Pause() // A stalls: no renewals reach etcd
	select {
	case <-a.Done():
		fmt.Fprintln(out, "A's lease is lost (Done fired)")
	case <-ctx.Done():
		return errors.New("lease of A was never lost")
	}

	b2, err := locksB.Acquire(ctx, "accounts")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "B holds the lease, fencing token %d\n", b2.Fence().Revision)
	if err := deposit(b2, "B", 10); err != nil {
		return fmt.Errorf("deposit of B: %w", err)
	}
	fmt.Fprintln(out, "B deposits 10: committed")

	// A wakes up, unaware, and writes with its old token.
	err = deposit(a, "A", 1000)
	var stale *fence.RefusedError
	if !errors.As(err, &stale) {
		return fmt.Errorf("late deposit of A was not refused as stale: %v", err)
	}
	fmt.Fprintf(out, "A deposits 1000 late: refused by the database: token %d < mark %d\n",
		stale.Token.Revision, stale.Mark.Revision)

	var owner string
	var balance int64
	if err := db.QueryRowContext(ctx, "SELECT owner, balance FROM "+accounts+" WHERE id = 'alice'").Scan(&owner, &balance); err != nil {
		return err
	}
	fmt.Fprintf(out, "account: last written by %s, balance %d\n", owner, balance)
	if owner != "B" || balance != 111 {
		return fmt.Errorf("account is %s/%d, want B/111", owner, balance)
	}
	if err := b2.Release(ctx); err != nil {
		return fmt.Errorf("release of B: %w", err)
	}
	proxy.Resume()
	return nil
}
