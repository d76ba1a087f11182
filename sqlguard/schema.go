package sqlguard

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// Schema returns the DDL that creates g's fence table and idempotency-key
// table, one statement per element, each "CREATE TABLE IF NOT EXISTS". Run
// it with your migration tool, or call Migrate. The idempotency-key table
// is left out when g was configured with WithTable and without
// WithRequestTable (see WithTable).
//
// The fence table holds one row per resource: resource (primary key),
// lock_key (the lock the mark is bound to), token (the mark) and seq (the
// count of accepted fences). Column types are chosen so that comparisons
// are exact: BIGINT tokens (SQLite: INTEGER, which has integer affinity and
// is checked with typeof), and on MySQL and MariaDB VARBINARY names,
// because their default collations compare "Orders" equal to "orders" and
// ignore trailing spaces.
func (g *Guard) Schema() []string {
	ddl := g.schema()
	if g.cluster != "" {
		i := strings.LastIndex(ddl[0], "\n)")
		ddl[0] = ddl[0][:i] + ",\n\tcluster_id " + g.clusterType() + ddl[0][i:]
	}
	if !g.withReq {
		return ddl[:1]
	}
	return ddl
}

func (g *Guard) schema() []string {
	switch g.d {
	case PostgreSQL:
		return []string{
			"CREATE TABLE IF NOT EXISTS " + g.table + ` (
	resource TEXT PRIMARY KEY,
	lock_key TEXT NOT NULL,
	token BIGINT NOT NULL CHECK (token >= 0),
	seq BIGINT NOT NULL DEFAULT 0
)`,
			"CREATE TABLE IF NOT EXISTS " + g.requests + ` (
	request_id TEXT PRIMARY KEY,
	created_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`,
		}
	case MySQL, MariaDB:
		return []string{
			"CREATE TABLE IF NOT EXISTS " + g.table + ` (
	resource VARBINARY(255) NOT NULL PRIMARY KEY,
	lock_key VARBINARY(512) NOT NULL,
	token BIGINT NOT NULL,
	seq BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB`,
			"CREATE TABLE IF NOT EXISTS " + g.requests + ` (
	request_id VARBINARY(255) NOT NULL PRIMARY KEY,
	created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`,
		}
	default: // SQLite
		return []string{
			"CREATE TABLE IF NOT EXISTS " + g.table + ` (
	resource TEXT NOT NULL PRIMARY KEY,
	lock_key TEXT NOT NULL,
	token INTEGER NOT NULL CHECK (typeof(token) = 'integer'),
	seq INTEGER NOT NULL DEFAULT 0 CHECK (typeof(seq) = 'integer')
)`,
			"CREATE TABLE IF NOT EXISTS " + g.requests + ` (
	request_id TEXT NOT NULL PRIMARY KEY,
	created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)`,
		}
	}
}

// Migrate runs Schema on q and then CheckSchema. It is idempotent. An
// existing table of the same name is left as is and checked: Migrate fails
// with *SchemaError when it is unsafe. It creates the idempotency-key table
// only when Schema includes it (see WithTable).
func (g *Guard) Migrate(ctx context.Context, q DBTX) error {
	return engine{g}.Migrate(ctx, querier(q))
}

// Migrate is Guard.Migrate on a backend.Querier.
func (g engine) Migrate(ctx context.Context, q backend.Querier) error {
	if q == nil {
		return fmt.Errorf("%w: migrate: nil DBTX", ErrInvalid)
	}
	for _, stmt := range g.Schema() {
		if _, err := q.Exec(ctx, stmt); err != nil {
			return g.wrapErr(ctx, "migrate", err)
		}
	}
	if g.cluster != "" {
		// A fence table made before WithCluster lacks the column.
		cols, err := g.columns(ctx, q, g.tname)
		if err != nil {
			return err
		}
		if _, ok := cols["cluster_id"]; !ok {
			_, err := q.Exec(ctx, "ALTER TABLE "+g.table+" ADD COLUMN cluster_id "+g.clusterType())
			if err != nil {
				// A concurrent Migrate may have added it; CheckSchema tells.
				if cols, cerr := g.columns(ctx, q, g.tname); cerr != nil || !hasCol(cols, "cluster_id") {
					return g.wrapErr(ctx, "migrate: add cluster_id", err)
				}
			}
		}
	}
	return g.CheckSchema(ctx, q)
}

func hasCol(cols map[string]colInfo, name string) bool {
	_, ok := cols[name]
	return ok
}

// clusterType is the type of the fence table's cluster_id column: a
// nullable string, compared in Go.
func (g *Guard) clusterType() string {
	if g.d.mysqlLike() {
		return "VARBINARY(32) NULL"
	}
	return "TEXT"
}

// CheckSchema verifies that the fence table and the idempotency-key table
// (when Schema includes it) exist with safe column types. It returns *SchemaError (ErrUnsafeSchema)
// for a missing table or column, a token or seq column that is not a
// non-null 64-bit integer (on SQLite: without INTEGER affinity, where 10
// compares below '9' as text and a stale token would pass), or, on MySQL
// and MariaDB, name columns that are not binary strings.
func (g *Guard) CheckSchema(ctx context.Context, q DBTX) error {
	return engine{g}.CheckSchema(ctx, querier(q))
}

// CheckSchema is Guard.CheckSchema on a backend.Querier.
func (g engine) CheckSchema(ctx context.Context, q backend.Querier) error {
	if q == nil {
		return fmt.Errorf("%w: check schema: nil DBTX", ErrInvalid)
	}
	cols, err := g.columns(ctx, q, g.tname)
	if err != nil {
		return err
	}
	for _, c := range []string{"token", "seq"} {
		if err := g.checkInt(g.tname, c, cols, true); err != nil {
			return err
		}
	}
	for _, c := range []string{"resource", "lock_key"} {
		if err := g.checkName(g.tname, c, cols); err != nil {
			return err
		}
	}
	if g.cluster != "" && !hasCol(cols, "cluster_id") {
		return &SchemaError{Table: g.tname, Column: "cluster_id", Reason: "column does not exist (WithCluster needs it; Migrate adds it)"}
	}
	if !g.withReq {
		return nil
	}
	rcols, err := g.columns(ctx, q, g.rname)
	if err != nil {
		return err
	}
	return g.checkName(g.rname, "request_id", rcols)
}

// CheckColumn verifies that table.column can serve as a row-column fence:
// a 64-bit integer (SQLite: INTEGER affinity). A nullable column is
// accepted; NULL counts as 0. It returns *SchemaError otherwise.
func (g *Guard) CheckColumn(ctx context.Context, q DBTX, table, column string) error {
	return engine{g}.CheckColumn(ctx, querier(q), table, column)
}

// CheckColumn is Guard.CheckColumn on a backend.Querier.
func (g engine) CheckColumn(ctx context.Context, q backend.Querier, table, column string) error {
	if column == "" {
		column = DefaultColumn
	}
	if err := validName(table); err != nil {
		return err
	}
	if err := validIdent(column); err != nil {
		return err
	}
	if q == nil {
		return fmt.Errorf("%w: check column: nil DBTX", ErrInvalid)
	}
	cols, err := g.columns(ctx, q, table)
	if err != nil {
		return err
	}
	return g.checkInt(table, column, cols, false)
}

type colInfo struct {
	typ     string // lower case
	notNull bool
}

func (g *Guard) columns(ctx context.Context, q backend.Querier, name string) (map[string]colInfo, error) {
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		schema, table = "", name
	}
	var query string
	var args []any
	switch g.d {
	case PostgreSQL:
		query = `SELECT column_name, data_type, is_nullable = 'NO' FROM information_schema.columns
WHERE table_name = $1 AND table_schema = COALESCE(NULLIF($2, ''), current_schema())`
		args = []any{table, schema}
	case MySQL, MariaDB:
		query = `SELECT column_name, column_type, is_nullable = 'NO' FROM information_schema.columns
WHERE table_name = ? AND table_schema = COALESCE(NULLIF(?, ''), DATABASE())`
		args = []any{table, schema}
	default:
		if schema == "" {
			schema = "main"
		}
		query = `SELECT name, type, "notnull" <> 0 FROM pragma_table_info(?, ?)`
		args = []any{table, schema}
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, g.wrapErr(ctx, "read schema of "+name, err)
	}
	defer rows.Close()
	cols := map[string]colInfo{}
	for rows.Next() {
		var n, t string
		var nn bool
		if err := rows.Scan(&n, &t, &nn); err != nil {
			return nil, g.wrapErr(ctx, "read schema of "+name, err)
		}
		cols[strings.ToLower(n)] = colInfo{typ: strings.ToLower(t), notNull: nn}
	}
	if err := rows.Err(); err != nil {
		return nil, g.wrapErr(ctx, "read schema of "+name, err)
	}
	if len(cols) == 0 {
		return nil, &SchemaError{Table: name, Reason: "table does not exist"}
	}
	return cols, nil
}

func (g *Guard) checkInt(table, column string, cols map[string]colInfo, notNull bool) error {
	c, ok := cols[strings.ToLower(column)]
	if !ok {
		return &SchemaError{Table: table, Column: column, Reason: "column does not exist"}
	}
	var good bool
	switch g.d {
	case PostgreSQL:
		good = c.typ == "bigint"
	case MySQL, MariaDB:
		// column_type, e.g. "bigint(20)"; unsigned would refuse nothing
		// but is not what database/sql binds int64 to.
		good = strings.HasPrefix(c.typ, "bigint") && !strings.Contains(c.typ, "unsigned")
	default:
		// SQLite's rule 1 of type affinity: a declared type containing
		// "INT" has INTEGER affinity. Anything else may store a token as
		// text or real, which then compares wrongly.
		good = strings.Contains(c.typ, "int")
	}
	if !good {
		return &SchemaError{Table: table, Column: column, Type: c.typ, Reason: "not a 64-bit integer column (SQLite: no INTEGER affinity); tokens would compare wrongly"}
	}
	if notNull && !c.notNull {
		return &SchemaError{Table: table, Column: column, Type: c.typ, Reason: "nullable; a NULL token compares as unknown"}
	}
	return nil
}

func (g *Guard) checkName(table, column string, cols map[string]colInfo) error {
	c, ok := cols[strings.ToLower(column)]
	if !ok {
		return &SchemaError{Table: table, Column: column, Reason: "column does not exist"}
	}
	if !c.notNull {
		return &SchemaError{Table: table, Column: column, Type: c.typ, Reason: "nullable"}
	}
	if g.d.mysqlLike() && !strings.HasPrefix(c.typ, "varbinary") {
		// Text collations compare case- and trailing-space-insensitively;
		// BINARY(n) pads with NUL bytes, so a lookup never matches.
		return &SchemaError{Table: table, Column: column, Type: c.typ,
			Reason: "not VARBINARY; text columns compare 'a' equal to 'A' or 'a '"}
	}
	return nil
}
