package pgxguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A fenced transaction on a pool: the shape of pgx.BeginTxFunc, plus the
// token and the resources to fence. (Not run: it needs a PostgreSQL
// server; the package's tests run the same flow on FENCEKIT_PG_DSN.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	g, err := pgxguard.New() // sqlguard's options: WithVerifier, WithMetrics, ...
	if err != nil {
		panic(err)
	}
	if err := g.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	tok := fence.Token{Lock: "accounts", Revision: 9} // from lease.Lease.Fence()
	err = g.RunTx(ctx, pool, pgx.TxOptions{}, tok, []string{"account/alice"}, func(ctx context.Context, tx pgx.Tx) error {
		if err := g.Record(ctx, tx, "deposit-42"); err != nil {
			return err // ErrDuplicate: applied before
		}
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", 10, "alice")
		return err
	})
	var stale *fence.RefusedError
	switch {
	case errors.As(err, &stale):
		fmt.Println("superseded: the lock's newer holder wrote revision", stale.Mark.Revision)
	case err != nil:
		panic(err)
	}
}

// Fence and Record must run in the caller's transaction: a pool is
// refused before any SQL, as is an invalid token. Neither needs a server:
// pgxpool.New connects lazily.
func ExampleGuard_Fence() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	g, err := pgxguard.New()
	if err != nil {
		panic(err)
	}
	err = g.Fence(ctx, pool, fence.Token{Lock: "accounts", Revision: 9}, "account/alice")
	fmt.Println(errors.Is(err, sqlguard.ErrNeedTx))
	err = g.Fence(ctx, pool, fence.Token{Lock: "accounts", Revision: 0}, "account/alice")
	fmt.Println(errors.Is(err, sqlguard.ErrInvalid), errors.Is(err, fence.ErrInvalid))
	// Output:
	// true
	// true true
}

// PostgreSQL's transient conflicts, as pgx reports them, are retryable;
// RunTx retries them with the same token.
func ExampleGuard_Classify() {
	g, err := pgxguard.New()
	if err != nil {
		panic(err)
	}
	for _, code := range []string{"40001", "40P01", "55P03", "23505"} {
		err := g.Classify(&pgconn.PgError{Code: code})
		fmt.Println(code, errors.Is(err, sqlguard.ErrRetryable))
	}
	// Output:
	// 40001 true
	// 40P01 true
	// 55P03 true
	// 23505 false
}

// One Guard for a program that writes through database/sql and pgx: the
// same tables, metrics and verified tokens.
func ExampleWrap() {
	sg, err := sqlguard.New(sqlguard.PostgreSQL, sqlguard.WithTable("app.fence_tokens"))
	if err != nil {
		panic(err)
	}
	g, err := pgxguard.Wrap(sg)
	if err != nil {
		panic(err)
	}
	fmt.Println(g.SQL() == sg)
	_, err = pgxguard.Wrap(must(sqlguard.New(sqlguard.SQLite)))
	fmt.Println(errors.Is(err, sqlguard.ErrInvalid))
	// Output:
	// true
	// true
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
