package sqlguard

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/observe"
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
	"github.com/prometheus/client_golang/prometheus"
)

// DBTX is the part of database/sql that sqlguard runs statements through.
// *sql.DB, *sql.Tx and *sql.Conn satisfy it.
//
// Methods that must share a transaction with the caller's writes (Fence,
// Record) refuse a *sql.DB, because each statement on a *sql.DB may run on
// a different connection and commits on its own. On a *sql.Conn they assume
// the caller began a transaction on that connection.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Beginner starts transactions. *sql.DB and *sql.Conn satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Dialect names the SQL dialect a Guard writes. The zero Dialect is invalid.
type Dialect int

const (
	// PostgreSQL is PostgreSQL 15 or later (tested with pgx/v5/stdlib).
	PostgreSQL Dialect = iota + 1
	// MySQL is MySQL 8 (go-sql-driver/mysql).
	MySQL
	// MariaDB is MariaDB 10.11 or later (go-sql-driver/mysql). It differs
	// from MySQL in syntax sqlguard avoids, and in its error for a row
	// changed since the transaction's snapshot (1020), which is retryable.
	MariaDB
	// SQLite is SQLite 3.35 or later (tested with modernc.org/sqlite).
	SQLite
)

// String returns the dialect's name, for example "postgresql".
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case MySQL:
		return "mysql"
	case MariaDB:
		return "mariadb"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

func (d Dialect) valid() bool { return d >= PostgreSQL && d <= SQLite }

func (d Dialect) mysqlLike() bool { return d == MySQL || d == MariaDB }

// Detect asks the database which dialect it speaks. It runs "SELECT
// version()" (PostgreSQL, MySQL, MariaDB) and, when that fails, "SELECT
// sqlite_version()". Run it on a *sql.DB or outside a transaction: on a
// database that is none of these, the failed probe may abort a transaction.
// It returns an error matching ErrUnknownDialect when the answer is not
// recognised.
func Detect(ctx context.Context, q DBTX) (Dialect, error) {
	var v string
	err := q.QueryRowContext(ctx, "SELECT version()").Scan(&v)
	if err == nil {
		switch {
		case strings.Contains(v, "PostgreSQL"):
			return PostgreSQL, nil
		case strings.Contains(v, "MariaDB"):
			return MariaDB, nil
		case v != "" && v[0] >= '5' && v[0] <= '9' && !strings.Contains(v, "TiDB"):
			return MySQL, nil
		}
		return 0, fmt.Errorf("%w: version() = %q", ErrUnknownDialect, v)
	}
	if ctx.Err() != nil {
		return 0, ctxErr(ctx, err)
	}
	if err2 := q.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err2 == nil {
		return SQLite, nil
	}
	if ctx.Err() != nil {
		return 0, ctxErr(ctx, err)
	}
	return 0, fmt.Errorf("%w: version(): %w", ErrUnknownDialect, err)
}

// Default table names.
const (
	// DefaultTable is the fence table's default name.
	DefaultTable = "fence_tokens"
	// DefaultRequestTable is the idempotency-key table's default name.
	DefaultRequestTable = "fence_requests"
	// DefaultColumn is the default fence column in row-column mode.
	DefaultColumn = "fence"
)

// Limits on the strings sqlguard stores. They match the column widths of
// the DDL from Schema.
const (
	// MaxResourceLen is the longest resource name, in bytes.
	MaxResourceLen = 255
	// MaxRequestIDLen is the longest idempotency key, in bytes.
	MaxRequestIDLen = 255
	// MaxIdentLen is the longest table or column name part, in bytes.
	MaxIdentLen = 63
)

// Option configures a Guard.
type Option interface{ apply(*config) error }

type config struct {
	table, requests string
	// tableSet and requestsSet record WithTable and WithRequestTable: the
	// request table is part of the schema unless only WithTable was given.
	tableSet, requestsSet bool
	attempts              int
	obs                   observe.Options
	verifier              Verifier
	cluster               string
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithTable sets the fence table's name (default DefaultTable). The name is
// one identifier or "schema.table"; see the package doc for what an
// identifier may contain.
//
// With WithTable and without WithRequestTable, the Guard has no
// idempotency-key table: Schema, Migrate and CheckSchema leave it out, and
// Record and Recorded fail on a missing table. Add WithRequestTable to use
// idempotency keys.
func WithTable(name string) Option {
	return optionFunc(func(c *config) error {
		if err := validName(name); err != nil {
			return fmt.Errorf("fence table: %w", err)
		}
		c.table = name
		c.tableSet = true
		return nil
	})
}

// WithRequestTable sets the idempotency-key table's name (default
// DefaultRequestTable), with the same rules as WithTable, and makes
// Schema, Migrate and CheckSchema include it. A Guard with neither
// WithTable nor WithRequestTable has both tables under their default
// names.
func WithRequestTable(name string) Option {
	return optionFunc(func(c *config) error {
		if err := validName(name); err != nil {
			return fmt.Errorf("request table: %w", err)
		}
		c.requests = name
		c.requestsSet = true
		return nil
	})
}

// WithMaxAttempts sets how many times RunTx and Claim run a transaction
// that fails with a retryable error before giving up (default 8; n >= 1).
func WithMaxAttempts(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max attempts %d < 1", ErrInvalid, n)
		}
		c.attempts = n
		return nil
	})
}

// WithCluster records id, the ID of the etcd cluster that issues the
// Guard's tokens (the ClusterId of any etcd response header, e.g.
// clientv3.Client.MemberList(ctx).Header.ClusterId), with every mark the
// Guard advances or resets, in the fence table's cluster_id column (Migrate
// adds it to an existing table). A token refused as stale by a mark that
// another cluster's Guard wrote is then refused with outcome mark_ahead
// (a *fence.RefusedError matching ErrOtherCluster, fence.ErrMarkAhead and
// fence.ErrStale): a new or restored etcd cluster
// starts revisions again, so every holder of it is refused until an
// operator resets the mark with ResetMark. id must not be 0. Without
// WithCluster, marks carry no cluster and such a refusal is a plain
// stale refusal whose text names this case. Row-column mode records no
// cluster.
func WithCluster(id uint64) Option {
	return optionFunc(func(c *config) error {
		if id == 0 {
			return fmt.Errorf("%w: cluster ID 0", ErrInvalid)
		}
		c.cluster = strconv.FormatUint(id, 16)
		return nil
	})
}

// Guard writes fenced statements in one dialect. It holds no connection and
// no state besides its configuration (and the metrics and logger of
// WithMetrics and WithLogger, and the verified tokens of WithVerifier),
// and is safe for concurrent use.
type Guard struct {
	d        Dialect
	table    string // quoted
	tname    string // unquoted, as configured
	requests string // quoted
	rname    string
	withReq  bool   // Schema, Migrate and CheckSchema include the request table
	cluster  string // WithCluster's ID in hexadecimal, or ""
	attempts int
	obs      *observe.Observer
	retries  prometheus.Counter // nil without WithMetrics
	ver      Verifier           // nil without WithVerifier
	verified *verifiedCache
}

// New returns a Guard for dialect d. It returns an error matching ErrInvalid
// for an unknown dialect or an invalid option, and the registry's error
// when the metrics of WithMetrics cannot be registered.
func New(d Dialect, opts ...Option) (*Guard, error) {
	if !d.valid() {
		return nil, fmt.Errorf("%w: dialect %v", ErrInvalid, d)
	}
	c := config{table: DefaultTable, requests: DefaultRequestTable, attempts: 8}
	for _, o := range opts {
		if err := o.apply(&c); err != nil {
			return nil, fmt.Errorf("sqlguard: %w", err)
		}
	}
	obs, err := observe.New(spec, c.obs)
	if err != nil {
		return nil, err
	}
	retries, err := newRetries(c.obs.Registerer)
	if err != nil {
		return nil, err
	}
	return &Guard{
		d:        d,
		table:    quoteName(d, c.table),
		tname:    c.table,
		requests: quoteName(d, c.requests),
		rname:    c.requests,
		withReq:  c.requestsSet || !c.tableSet,
		cluster:  c.cluster,
		attempts: c.attempts,
		obs:      obs,
		retries:  retries,
		ver:      c.verifier,
		verified: &verifiedCache{},
	}, nil
}

// Open detects the dialect of q with Detect and returns New(dialect, opts...).
func Open(ctx context.Context, q DBTX, opts ...Option) (*Guard, error) {
	d, err := Detect(ctx, q)
	if err != nil {
		return nil, err
	}
	return New(d, opts...)
}

// Dialect returns the dialect g writes.
func (g *Guard) Dialect() Dialect { return g.d }

// ph returns the i'th (1-based) placeholder.
func (g *Guard) ph(i int) string {
	if g.d == PostgreSQL {
		return "$" + strconv.Itoa(i)
	}
	return "?"
}

// lockingRead is the suffix that makes a SELECT read the latest committed
// row and lock it: InnoDB's plain SELECT reads the transaction's snapshot.
func (g *Guard) lockingRead() string {
	if g.d == SQLite {
		return "" // one writer at a time; the write lock is already held
	}
	return " FOR UPDATE"
}

// validIdent reports whether s is a plain identifier: an ASCII letter or
// underscore, then letters, digits or underscores, at most MaxIdentLen.
func validIdent(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty identifier", ErrInvalid)
	}
	if len(s) > MaxIdentLen {
		return fmt.Errorf("%w: identifier longer than %d bytes", ErrInvalid, MaxIdentLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Errorf("%w: identifier %q: only ASCII letters, digits and '_' are allowed, not starting with a digit", ErrInvalid, s)
		}
	}
	return nil
}

// validName accepts "ident" or "schema.ident".
func validName(s string) error {
	schema, name, qualified := strings.Cut(s, ".")
	if qualified {
		if err := validIdent(schema); err != nil {
			return err
		}
		return validIdent(name)
	}
	return validIdent(s)
}

func quoteIdent(d Dialect, s string) string {
	if d.mysqlLike() {
		return "`" + s + "`"
	}
	return `"` + s + `"`
}

// quoteName quotes a name already checked by validName.
func quoteName(d Dialect, s string) string {
	if schema, name, ok := strings.Cut(s, "."); ok {
		return quoteIdent(d, schema) + "." + quoteIdent(d, name)
	}
	return quoteIdent(d, s)
}

// validText checks a stored string: a resource name, lock name or
// idempotency key. Invalid UTF-8 and NUL bytes are refused up front because
// PostgreSQL refuses them too, but only after a round trip that aborts the
// transaction.
func validText(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(s) > max:
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalid, what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, what)
	}
	return nil
}

func validToken(tok fence.Token) error {
	if err := tok.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := validText("lock name", tok.Lock, fence.MaxNameLen); err != nil {
		return err
	}
	return nil
}

// needTx refuses a pool (*sql.DB, *pgxpool.Pool) where the statement must
// share the caller's transaction.
func needTx(q backend.Querier, op string) error {
	if q == nil {
		return fmt.Errorf("%w: %s: nil DBTX", ErrInvalid, op)
	}
	if q.Pool() {
		return fmt.Errorf("%w: %s on %s", ErrNeedTx, op, q.Kind())
	}
	return nil
}

// queryRow runs a query expected to return at most one row and scans it
// into dest. found is false when there is no row.
func queryRow(ctx context.Context, q backend.Querier, query string, args []any, dest ...any) (found bool, err error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	if err := rows.Scan(dest...); err != nil {
		return false, err
	}
	return true, rows.Err()
}
