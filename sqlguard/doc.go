// Package sqlguard makes a SQL database itself refuse writes that carry a
// stale fencing token: a holder whose lease was lost and taken over by a
// newer holder cannot commit, even when it wakes up late with a write
// already on the wire.
//
// It works through database/sql with PostgreSQL (15+, pgx/v5/stdlib),
// MySQL 8 and MariaDB (10.11+, go-sql-driver/mysql with either
// clientFoundRows setting) and SQLite (3.35+, modernc.org/sqlite). [Detect]
// tells the dialects apart; [New] takes one explicitly. sqlguard imports
// no driver and registers none: the program imports the one it uses.
// MySQL and MariaDB errors are told apart by the number in the driver's
// *mysql.MySQLError, read without importing the driver.
//
// Programs that use pgx directly (pgx.Tx, *pgxpool.Pool, *pgx.Conn) use
// package sqlguard/pgxguard instead of a second pool through
// pgx/v5/stdlib: the same Guard, statements, errors, metrics, logs and
// verifier, with pgx's types, and a RunTx shaped like pgx.BeginTxFunc.
// Its statements use no named prepared statements, so they stay correct
// across schema migrations and behind PgBouncer in transaction mode.
//
// # Behind PgBouncer
//
// sqlguard needs no session state: every check and its writes are one
// transaction, so it works through a pooler in transaction mode (tested
// with PgBouncer 1.18, pool_mode = transaction). PgBouncer before 1.21
// keeps no prepared statements across transactions: open the database/sql
// pool with default_query_exec_mode=exec (or simple_protocol) in the pgx
// connection string, and set pgx.ConnConfig.DefaultQueryExecMode likewise
// for your own statements on the pgx path.
//
// pgx/v5/stdlib caches prepared statements per connection (pgx's default
// mode), sqlguard's included: after a migration that changes a column's
// type, the next run of a cached statement fails once with SQLSTATE 0A000
// "cached plan must not change result type". sqlguard classifies it as
// [ErrRetryable], so [Guard.RunTx] runs the transaction again and gets the
// new schema's results.
//
// # Two modes
//
// Fence-table mode is the general one. A table (default "fence_tokens",
// created by [Guard.Migrate] or the DDL from [Guard.Schema]) holds per
// resource the highest token accepted (the mark), the lock it is bound to,
// and a sequence number. [Guard.Fence] runs, inside the caller's
// transaction and before its writes, one guarded statement per resource
// that accepts a token for the mark's lock that is equal (the same holder
// writing again) or newer, and refuses an older one (fence.ErrStale) or one for
// another lock (fence.ErrWrongLock). The statement is never "SELECT, compare in
// Go, UPDATE", which lets stale writes through under concurrency:
//
//	PostgreSQL, SQLite: INSERT ... ON CONFLICT (resource) DO UPDATE SET ...
//	                    WHERE f.token <= excluded.token AND f.lock_key = excluded.lock_key
//	MySQL, MariaDB:     INSERT ... (token 0) ON DUPLICATE KEY UPDATE resource = resource;
//	                    UPDATE ... SET seq = seq + 1, token = ? WHERE resource = ? AND lock_key = ? AND token <= ?
//
// A resource is bound to a lock for good: by [Guard.Bind], which declares
// it in advance, or else by the first token that fences it, whatever its
// lock (so a first token of the wrong lock would bind it wrongly). Bind
// each resource when several locks or outside callers can name it.
//
// Several resources are fenced in sorted order, so transactions that fence
// overlapping sets cannot deadlock on each other. [Guard.RunTx] begins the
// transaction, fences, runs your function and commits, retrying the whole
// transaction with the same token on transient conflicts. [Guard.Claim]
// lets a new holder advance its marks before it reads. A transaction that
// writes under several locks at once (a lease.Set: a transfer between two
// accounts, each with its own lock) uses [Guard.RunTxAll] or
// [Guard.FenceAll], which fence each resource with the token of its own
// lock in the one transaction: a refusal of any rolls back all.
//
// Row-column mode ([Guard.Update], [Guard.Upsert]) keeps the fence in a
// column of the protected row and appends "AND (fence <= token OR fence IS
// NULL)" to your parenthesised predicate. It needs no extra table but
// compares revisions only (no lock binding), cannot fence DELETE (use a
// tombstone flag), and on a refusal reads the rows back to tell a stale
// token (fence.ErrStale) from a missing row ([ErrNoRow]); its
// *fence.RefusedError names the row (its Row field).
//
// [Guard.Record] stores an idempotency key in the same transaction and
// refuses a repeat with [ErrDuplicate]: the fencing token stops a late
// holder, the key stops the same request from being applied twice. Keys
// live in their own table (default "fence_requests"), which Migrate
// creates unless the Guard was configured with [WithTable] alone: add
// [WithRequestTable] to use keys with a custom fence table.
//
// # Guarantees
//
// When every write to a resource runs in a transaction that first passes
// [Guard.Fence] for it, on the same *sql.Tx (or *sql.Conn in a transaction):
//
//   - a transaction with token 5 cannot commit its writes after a
//     transaction with token 7 for the same lock committed its own; the
//     fence row's lock orders fenced transactions, and each guarded
//     statement compares with the latest committed mark (PostgreSQL READ
//     COMMITTED re-checks after a lock wait; InnoDB UPDATE reads the
//     latest row; SQLite has one writer). Isolation levels that cannot
//     compare with the latest row fail with a retryable error instead
//     (PostgreSQL REPEATABLE READ and SERIALIZABLE: 40001; MariaDB with
//     innodb_snapshot_isolation: 1020);
//   - marks never go down, and an equal token is accepted again, so a
//     transaction retried with the same token is safe for the fence;
//   - a rolled-back transaction leaves the mark as it was: a newer holder
//     that rolls back does not lock out the older one;
//   - tokens are int64 and stored exactly; a token whose revision is <= 0
//     (etcd's "no key") is refused before any SQL, never read as "no
//     check";
//   - names of tables and columns are plain ASCII identifiers (a letter or
//     '_', then letters, digits or '_', at most 63 bytes, optionally
//     "schema.table"), checked and quoted; every value is a bound
//     parameter. Resource names and idempotency keys are 1 to 255 bytes of
//     UTF-8 without NUL.
//
// # Verification
//
// A fencing token is a claim anyone can make: without verification, a
// token newer than the mark advances it, so one made-up token (or one from
// another etcd cluster, or from a cluster restored without
// --bump-revision) locks every real holder out of the resource for good.
// Verify tokens wherever they arrive from outside the process:
//
//	g, err := sqlguard.New(sqlguard.PostgreSQL, sqlguard.WithVerifier(locks.Verifier()))
//
// With [WithVerifier], Fence, Claim, RunTx, Update and Upsert ask the
// verifier (lease.Verifier: one etcd range read) before any statement
// that could advance a mark with a token this Guard has not verified
// yet, and refuse a token it does not confirm with a *fence.RefusedError
// (fence.ErrUnverified) with nothing changed. A verified guard promises that
// only the token of the lock's current holder at the time of the check
// can raise a mark or a row's fence. The Guard remembers, per lock, the
// last token verified, so a holder's repeated transactions cost one etcd
// read per acquisition; that token stays admitted until a newer one of
// the lock is verified, as a holder whose lease ended just after the
// check would be without a cache (a successor's newer token still
// passes, and a [Guard.Claim] by the successor shuts the old holder out).
// When the verifier cannot answer, the call fails and nothing changes.
//
// A mark poisoned before a verifier was configured is set back with
// [Guard.ResetMark], an operator's action that names the exact old mark
// (fence.ErrMarkChanged otherwise) and logs both marks at Warn.
//
// # What it does not guarantee
//
//   - Writes that skip the fence, run on another connection (a *sql.DB
//     outside the transaction; Fence refuses a *sql.DB for this reason) or
//     go to another database are not protected. There is no atomicity
//     across databases.
//   - Rolling back to a savepoint taken before Fence undoes the advance
//     and releases the fence row's lock while the transaction goes on:
//     fence outside savepoints, or fence again just before COMMIT.
//   - Fencing orders writes; it does not stop an old holder's write from
//     landing before the new holder's first fenced transaction. Call
//     [Guard.Claim] before reading state you are going to overwrite.
//   - SQLite: begin write transactions with "_txlock=immediate" in the
//     modernc DSN, or fence first. A deferred transaction that reads and
//     then writes fails with SQLITE_BUSY_SNAPSHOT, which is retryable.
//   - Marks are only as durable as the database: promoting an asynchronous
//     replica can lose advances, and restoring etcd from a snapshot
//     without --bump-revision can hand out old revisions again. A new
//     etcd cluster (a fresh embedded etcd, a rebuilt cluster) restarts
//     revisions at 2, so marks of the old one refuse every new holder as
//     stale until an operator resets them with [Guard.ResetMark]; with
//     [WithCluster] each mark records the cluster ID and that refusal has
//     the distinct outcome mark_ahead (fence.ErrMarkAhead,
//     [ErrOtherCluster]).
//   - A COMMIT interrupted by a lost connection has an unknown outcome
//     ([ErrCommitUnknown]); use [Guard.Record] to make a re-run safe.
//   - Only modernc.org/sqlite errors are classified for SQLite; other
//     SQLite drivers work but their busy errors are not [ErrRetryable].
//   - Without [WithVerifier], any token newer than the mark advances it:
//     a client able to choose the token can raise the mark.
//
// Errors are matched with errors.Is and errors.As. A refused token is a
// *fence.RefusedError, the refusal type of every package of the module,
// carrying the resource (the table in row-column mode, with Row), the
// refused token and the current mark, and an Outcome whose word is the
// metrics' and logs' (fence.ErrStale, fence.ErrWrongLock,
// fence.ErrMarkAhead, fence.ErrUnverified). This package's own conditions
// are its sentinels: [ErrNoRow], [ErrRetryable] (wrapping the driver's
// error), [ErrNeedTx], [ErrInvalid], [ErrDuplicate] ([*DuplicateError])
// and [ErrUnsafeSchema] ([*SchemaError]).
// A cancelled context stays matchable (errors.Is(err, context.Canceled)).
//
// # Observability
//
// [WithMetrics] counts every Fence, Update, Upsert, Claim and Record call
// by op and outcome in fencekit_sqlguard_decisions_total{op,outcome}, and
// RunTx's re-runs in fencekit_sqlguard_retries_total, on a caller's
// Prometheus registry. [WithLogger] logs stale, wrong-lock, unverified
// and duplicate refusals and ResetMark with package lease's field names ("lock" is a hash of the lock
// name, "fence" the refused token's revision, plus "mark", "resource",
// "outcome" and "op"), so a refusal joins to the lease records of the
// acquisition whose token it refused. Neither carries lock names,
// idempotency keys or owner tokens in clear; both are off by default.
//
// [WithTracerProvider] adds OpenTelemetry spans on a caller's
// TracerProvider (never the global one; without it nothing is started and
// the caller's span is left alone): "fencekit.sqlguard.tx" for each RunTx,
// with its attempts and an event per retry, and the function's statements
// as children; "fencekit.sqlguard.fence" for each Fence (and each attempt
// of RunTx); "fencekit.sqlguard.claim", "fencekit.sqlguard.update",
// "fencekit.sqlguard.upsert" and "fencekit.sqlguard.record". Each carries
// the outcome in the metrics' words, the mode ("table" or "row"), the
// table name, the lock's hash ("fencekit.lock", as in package lease's
// spans) and the token's revision as an integer ("fencekit.fence"); a
// refusal adds the log's fields and has status Error, whose description
// names no lock, idempotency key or row. pgxguard's Guard records the
// same spans.
//
// # PostgreSQL advisory locks or sqlguard?
//
// When the data lives in one PostgreSQL database and the critical section
// is one transaction on it, pg_advisory_xact_lock is the simpler tool;
// when sqlguard is needed instead:
// https://github.com/fencekit/fencekit/blob/main/docs/sql.md#postgresql-advisory-lock-or-sqlguard
package sqlguard
