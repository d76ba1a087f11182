// Package pgxguard fences PostgreSQL writes made through pgx
// (github.com/jackc/pgx/v5) natively: pgx.Tx, *pgxpool.Pool, *pgxpool.Conn
// and *pgx.Conn, without a second pool through pgx/v5/stdlib.
//
// A pgxguard.Guard is a *sqlguard.Guard for sqlguard.PostgreSQL seen
// through pgx's types. It runs the very statements of package sqlguard, in
// both modes (fence table and row column), with the same errors
// (*fence.RefusedError for a refused token; sqlguard.ErrNoRow, ErrDuplicate, ErrNeedTx,
// ErrRetryable for *pgconn.PgError codes 40001, 40P01 and 55P03, ...),
// the same metrics and log records, and the same verifier: everything the
// sqlguard package doc says about guarantees and limits holds here.
// Configure it with sqlguard's options, or share one *sqlguard.Guard
// between both paths with Wrap.
//
//	g, err := pgxguard.New(sqlguard.WithVerifier(locks.Verifier()))
//	...
//	err = g.RunTx(ctx, pool, pgx.TxOptions{}, l.Fence(), []string{"account/alice"},
//		func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", 10, "alice")
//			return err
//		})
//
// RunTx has the shape of pgx.BeginTxFunc with a token and the resources to
// fence; it retries retryable conflicts with the same token, so its
// function must be safe to run again.
//
// For OpenTelemetry spans pass sqlguard.WithTracerProvider to New (or Wrap
// a *sqlguard.Guard made with it): the pgx path records the spans of
// package sqlguard ("fencekit.sqlguard.tx", "fencekit.sqlguard.fence",
// ...), with the same attributes; there is no option of its own.
//
// # Prepared statements, migrations and poolers
//
// sqlguard's own statements run with pgx.QueryExecModeExec whatever the
// connection's DefaultQueryExecMode: one round trip, an unnamed statement,
// nothing cached on the server. So a schema migration (Migrate after the
// tables were dropped, a column type changed) cannot make a cached plan
// return a stale shape, and they work through PgBouncer in transaction
// mode, which before 1.21 (Debian 12 ships 1.18) loses named prepared
// statements between transactions.
//
// That safety costs a parse and a plan on the server per statement: a
// fenced row-column UPDATE costs 1.3-1.4x a plain UPDATE that pgx
// cached, where the database/sql path is within 1.05x of its own plain
// UPDATE. Guard.WithStatementCache returns a Guard whose statements follow
// the connection's mode (pgx's statement cache by default), which brings
// the row-column UPDATE to about 1.05x and a fence-table transaction to
// about 1.4x its plain counterpart (see
// https://github.com/fencekit/fencekit/blob/main/docs/performance.md); in
// exchange, after a migration that changes a result type the next run of
// each cached statement fails once with an error matching
// sqlguard.ErrRetryable, which RunTx retries by itself.
//
// Your own statements in the same transaction follow your connection's
// settings. Behind a transaction-mode pooler without prepared-statement
// support, set pgx.ConnConfig.DefaultQueryExecMode to QueryExecModeExec
// (or QueryExecModeSimpleProtocol), or default_query_exec_mode=exec in the
// connection string; pgx's default, QueryExecModeCacheStatement, fails
// there with "prepared statement ... does not exist". Session state (SET
// without LOCAL, session advisory locks, LISTEN) does not survive between
// transactions behind such a pooler either; sqlguard uses none.
package pgxguard
