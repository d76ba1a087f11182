package sqlguard

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// Assign is one "column = value" of a row-column write. Value is always
// bound as a parameter, never spliced into the SQL.
type Assign struct {
	// Column is a plain identifier (see the package doc).
	Column string
	// Value is the new value.
	Value any
}

// RowUpdate describes a fenced UPDATE in row-column mode: the rows carry
// their own fence column, and the update applies only where the stored
// fence is not newer than the token.
type RowUpdate struct {
	// Table is the table, "name" or "schema.name".
	Table string
	// Column is the fence column; "" means DefaultColumn. It should be
	// BIGINT NOT NULL DEFAULT 0 (SQLite: INTEGER); see CheckColumn. A NULL
	// fence counts as 0: any valid token may write it.
	Column string
	// Set lists the assignments; it must not assign Column.
	Set []Assign
	// Where selects the rows, for example "id = ?" ("id = $1" on
	// PostgreSQL, numbering WhereArgs only, from 1). It is wrapped in
	// parentheses, so "a = ? OR b = ?" cannot escape the fence predicate.
	// It is required: write "TRUE" (SQLite: "1") to target every row.
	Where string
	// WhereArgs are Where's parameters.
	WhereArgs []any
	// Single promises that Where selects at most one row, as a lookup by
	// primary key does. Update then sends one guarded UPDATE, in no
	// transaction of its own, and reads the row back only when that
	// statement changes nothing, to tell stale from missing: the cost of a
	// plain UPDATE in the common case. If Where selects several rows
	// anyway, each is fenced on its own (the rows not newer than the token
	// are updated) and the all-or-nothing refusal is lost.
	Single bool
}

// Update runs u with tok in row-column mode. It sets u.Column to
// tok.Revision on the rows it changes and refuses the whole update when any
// targeted row carries a newer fence. It returns the number of rows Where
// selects, all of which now carry tok.Revision.
//
// Row-column mode compares revisions only: the fence column does not record
// which lock wrote it, so it cannot report fence.ErrWrongLock (use Fence for
// that). It cannot fence an INSERT of a new key (use Upsert) nor a DELETE: a
// deleted row takes its fence with it, and a stale upsert can resurrect it.
// Delete by setting a flag (a tombstone) with Update instead.
//
// Errors: ErrInvalid before any SQL; an error matching ErrNoRow when
// Where selects no row; a *fence.RefusedError of Outcome fence.Stale
// (Resource is the table, Row the rows targeted, Mark the highest fence
// found, with tok's lock) when a row is newer, in which case some other
// rows may already be updated and the transaction must be rolled back;
// ErrRetryable; the context's error. q may be a *sql.DB, in which case
// Update runs in a transaction of its own, unless u.Single is set.
func (g *Guard) Update(ctx context.Context, q DBTX, tok fence.Token, u RowUpdate) (int64, error) {
	return engine{g}.Update(ctx, querier(q), tok, u)
}

// Update is Guard.Update on a backend.Querier: traced, counted and logged.
func (g engine) Update(ctx context.Context, q backend.Querier, tok fence.Token, u RowUpdate) (n int64, err error) {
	err = g.traced(ctx, "update", modeRow, u.Table, tok, func(ctx context.Context, sp *span) error {
		table, col, sets, err := g.checkUpdate(q, tok, u)
		if err != nil {
			return err
		}
		if err := g.verify(ctx, "update", tok); err != nil {
			return err
		}
		if u.Single {
			n, err = g.updateSingle(ctx, q, tok, u, table, col, sets)
		} else {
			err = g.inTx(ctx, q, func(q backend.Querier) error {
				n, err = g.update(ctx, q, tok, u, table, col, sets, describeWhere(u.Where, u.WhereArgs))
				return err
			})
		}
		if err == nil {
			sp.setInt(attrRows, int(n))
		}
		return err
	})
	return n, err
}

// checkUpdate validates Update's arguments before any SQL and returns u's
// quoted table, fence column and assigned columns.
func (g *Guard) checkUpdate(q backend.Querier, tok fence.Token, u RowUpdate) (table, col string, sets []string, err error) {
	if err := validToken(tok); err != nil {
		return "", "", nil, err
	}
	if table, col, err = g.rowNames(u.Table, u.Column); err != nil {
		return "", "", nil, err
	}
	if len(u.Set) == 0 {
		return "", "", nil, fmt.Errorf("%w: update %s: no assignments", ErrInvalid, u.Table)
	}
	if strings.TrimSpace(u.Where) == "" {
		return "", "", nil, fmt.Errorf("%w: update %s: empty Where", ErrInvalid, u.Table)
	}
	if sets, err = g.assignments(u.Set, col); err != nil {
		return "", "", nil, err
	}
	if q == nil {
		return "", "", nil, fmt.Errorf("%w: update: nil DBTX", ErrInvalid)
	}
	return table, col, sets, nil
}

// row describes the targeted rows for a stale refusal.
func (g *Guard) update(ctx context.Context, q backend.Querier, tok fence.Token, u RowUpdate, table, col string, sets []string, row string) (int64, error) {
	query, args := g.updateStmt(tok, u, table, col, sets)
	if _, err := q.Exec(ctx, query, args...); err != nil {
		return 0, g.wrapErr(ctx, "update "+u.Table, err)
	}
	// Classify with a locking read of every targeted row. The affected
	// count alone cannot tell stale from missing, nor (on MySQL without
	// clientFoundRows) an unchanged row from a refused one, nor a partial
	// multi-row update.
	return g.verifyRows(ctx, q, tok, u.Table, row, "SELECT "+col+" FROM "+table+" WHERE ("+u.Where+")"+g.lockingRead(), u.WhereArgs)
}

// updateSingle is Update for a Where that selects at most one row: one
// guarded statement, and a read only when it changed nothing.
func (g *Guard) updateSingle(ctx context.Context, q backend.Querier, tok fence.Token, u RowUpdate, table, col string, sets []string) (int64, error) {
	query, args := g.updateStmt(tok, u, table, col, sets)
	if n, err := q.Exec(ctx, query, args...); err != nil {
		return 0, g.wrapErr(ctx, "update "+u.Table, err)
	} else if n > 0 {
		return n, nil
	}
	// Nothing changed: the row is missing, newer, or (MySQL without
	// clientFoundRows) already held these values under this very token.
	rows, err := q.Query(ctx, "SELECT "+col+" FROM "+table+" WHERE ("+u.Where+")", u.WhereArgs...)
	if err != nil {
		return 0, g.wrapErr(ctx, "verify "+u.Table, err)
	}
	defer rows.Close()
	var n, newest, oldest int64
	for rows.Next() {
		var f sql.NullInt64
		if err := rows.Scan(&f); err != nil {
			return 0, g.wrapErr(ctx, "verify "+u.Table, err)
		}
		if n == 0 || f.Int64 < oldest {
			oldest = f.Int64
		}
		newest = max(newest, f.Int64)
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, g.wrapErr(ctx, "verify "+u.Table, err)
	}
	switch {
	case n == 0:
		return 0, fmt.Errorf("%w: no row in %s matches", ErrNoRow, u.Table)
	case newest > tok.Revision:
		return 0, refused(fence.Stale, u.Table, describeWhere(u.Where, u.WhereArgs), tok,
			fence.Token{Lock: tok.Lock, Revision: newest})
	case oldest < tok.Revision:
		// The UPDATE would have raised it: the row appeared after it ran.
		return 0, fmt.Errorf("%w: no row in %s matched when the update ran", ErrNoRow, u.Table)
	}
	return n, nil
}

// updateStmt builds the guarded UPDATE of u.
func (g *Guard) updateStmt(tok fence.Token, u RowUpdate, table, col string, sets []string) (string, []any) {
	var b strings.Builder
	var args []any
	b.WriteString("UPDATE " + table + " SET ")
	if g.d == PostgreSQL {
		// The user numbers Where from $1; number ours after it.
		args = append(args, u.WhereArgs...)
	}
	for i, s := range sets {
		args = append(args, u.Set[i].Value)
		b.WriteString(s + " = " + g.ph(len(args)) + ", ")
	}
	args = append(args, tok.Revision)
	tokPH := g.ph(len(args))
	// The fence is assigned last: MySQL evaluates SET left to right, and
	// no assignment may see the new fence. The test lives in WHERE.
	b.WriteString(col + " = " + tokPH + " WHERE (" + u.Where + ") AND (" + col + " <= ")
	if g.d == PostgreSQL {
		b.WriteString(tokPH)
	} else {
		args = append(args, u.WhereArgs...)
		args = append(args, tok.Revision)
		b.WriteString("?")
	}
	b.WriteString(" OR " + col + " IS NULL)")
	return b.String(), args
}

func (g *Guard) verifyRows(ctx context.Context, q backend.Querier, tok fence.Token, name, row, query string, args []any) (int64, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return 0, g.wrapErr(ctx, "verify "+name, err)
	}
	defer rows.Close()
	var n, newest int64
	for rows.Next() {
		var f sql.NullInt64
		if err := rows.Scan(&f); err != nil {
			return 0, g.wrapErr(ctx, "verify "+name, err)
		}
		n++
		newest = max(newest, f.Int64)
	}
	if err := rows.Err(); err != nil {
		return 0, g.wrapErr(ctx, "verify "+name, err)
	}
	switch {
	case n == 0:
		return 0, fmt.Errorf("%w: no row in %s matches", ErrNoRow, name)
	case newest > tok.Revision:
		return 0, refused(fence.Stale, name, row, tok, fence.Token{Lock: tok.Lock, Revision: newest})
	}
	return n, nil
}

// RowUpsert describes a fenced insert-or-update of one keyed row in
// row-column mode.
type RowUpsert struct {
	// Table is the table, "name" or "schema.name".
	Table string
	// Column is the fence column; "" means DefaultColumn.
	Column string
	// Key lists the columns and values of the row's primary key or of a
	// unique key; the values must not be NULL.
	Key []Assign
	// Set lists the other columns to write; it may be empty.
	Set []Assign
}

// Upsert inserts the row u.Key names with u.Set and fence tok.Revision, or
// updates it when its stored fence is not newer than tok. It returns
// a *fence.RefusedError (fence.ErrStale) when the stored fence is newer,
// and otherwise the errors of
// Update. PostgreSQL and SQLite use one INSERT ... ON CONFLICT DO UPDATE
// ... WHERE statement; MySQL and MariaDB an INSERT and, when the key
// exists, the guarded UPDATE of Update (ON DUPLICATE KEY UPDATE has no
// WHERE). q may be a *sql.DB, in which case Upsert runs in a transaction of
// its own.
func (g *Guard) Upsert(ctx context.Context, q DBTX, tok fence.Token, u RowUpsert) error {
	return engine{g}.Upsert(ctx, querier(q), tok, u)
}

// Upsert is Guard.Upsert on a backend.Querier: traced, counted and logged.
func (g engine) Upsert(ctx context.Context, q backend.Querier, tok fence.Token, u RowUpsert) error {
	return g.traced(ctx, "upsert", modeRow, u.Table, tok, func(ctx context.Context, _ *span) error {
		if err := validToken(tok); err != nil {
			return err
		}
		table, col, err := g.rowNames(u.Table, u.Column)
		if err != nil {
			return err
		}
		if len(u.Key) == 0 {
			return fmt.Errorf("%w: upsert %s: no key columns", ErrInvalid, u.Table)
		}
		keys, err := g.assignments(u.Key, col)
		if err != nil {
			return err
		}
		sets, err := g.assignments(u.Set, col)
		if err != nil {
			return err
		}
		if q == nil {
			return fmt.Errorf("%w: upsert: nil DBTX", ErrInvalid)
		}
		if err := g.verify(ctx, "upsert", tok); err != nil {
			return err
		}
		return g.inTx(ctx, q, func(q backend.Querier) error {
			return g.upsert(ctx, q, tok, u, table, col, keys, sets)
		})
	})
}

func (g *Guard) upsert(ctx context.Context, q backend.Querier, tok fence.Token, u RowUpsert, table, col string, keys, sets []string) error {
	cols := append(append(append([]string{}, keys...), sets...), col)
	args := make([]any, 0, len(cols))
	phs := make([]string, 0, len(cols))
	for _, a := range u.Key {
		args = append(args, a.Value)
	}
	for _, a := range u.Set {
		args = append(args, a.Value)
	}
	args = append(args, tok.Revision)
	for i := range cols {
		phs = append(phs, g.ph(i+1))
	}
	insert := "INSERT INTO " + table
	where := make([]string, len(keys))
	whereArgs := make([]any, len(keys))
	for i, k := range keys {
		where[i] = k + " = " + g.ph(i+1)
		whereArgs[i] = u.Key[i].Value
	}
	verify := "SELECT " + col + " FROM " + table + " WHERE " + strings.Join(where, " AND ") + g.lockingRead()
	values := " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(phs, ", ") + ")"

	if g.d.mysqlLike() {
		_, err := q.Exec(ctx, insert+values, args...)
		if err == nil {
			return nil
		}
		if !isMySQLNumber(err, 1062) { // ER_DUP_ENTRY
			return g.wrapErr(ctx, "upsert "+u.Table, err)
		}
		// The key exists: the guarded UPDATE (which may set only the fence).
		_, err = g.update(ctx, q, tok, RowUpdate{Table: u.Table, Column: u.Column, Set: u.Set,
			Where: strings.Join(where, " AND "), WhereArgs: whereArgs}, table, col, sets, describeKey(u.Key))
		return err
	}

	// PostgreSQL and SQLite: the alias keeps references unambiguous when
	// the table is schema-qualified.
	var b strings.Builder
	b.WriteString(insert + " AS sg_row" + values + " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET ")
	for _, s := range sets {
		b.WriteString(s + " = excluded." + s + ", ")
	}
	b.WriteString(col + " = excluded." + col + " WHERE sg_row." + col + " <= excluded." + col + " OR sg_row." + col + " IS NULL")
	n, err := q.Exec(ctx, b.String(), args...)
	if err != nil {
		return g.wrapErr(ctx, "upsert "+u.Table, err)
	}
	if n == 1 {
		return nil
	}
	_, err = g.verifyRows(ctx, q, tok, u.Table, describeKey(u.Key), verify, whereArgs)
	if err == nil {
		// Refused, yet not newer: cannot happen while the row is locked.
		err = asRetryable(fmt.Errorf("upsert %s: refused, but the stored fence allows %d", u.Table, tok.Revision))
	}
	return err
}

// rowNames validates and quotes a row-column table and fence column.
func (g *Guard) rowNames(table, column string) (string, string, error) {
	if err := validName(table); err != nil {
		return "", "", fmt.Errorf("table: %w", err)
	}
	if column == "" {
		column = DefaultColumn
	}
	if err := validIdent(column); err != nil {
		return "", "", fmt.Errorf("fence column: %w", err)
	}
	return quoteName(g.d, table), quoteIdent(g.d, column), nil
}

// assignments validates and quotes the columns of as; none may be the fence
// column.
func (g *Guard) assignments(as []Assign, fenceCol string) ([]string, error) {
	out := make([]string, len(as))
	for i, a := range as {
		if err := validIdent(a.Column); err != nil {
			return nil, fmt.Errorf("column: %w", err)
		}
		out[i] = quoteIdent(g.d, a.Column)
		if strings.EqualFold(out[i], fenceCol) {
			return nil, fmt.Errorf("%w: column %q is the fence column; sqlguard assigns it", ErrInvalid, a.Column)
		}
	}
	return out, nil
}

// inTx runs f on q, or in a transaction of its own when q is a pool
// (*sql.DB, *pgxpool.Pool), so that a multi-statement step never commits
// halfway.
func (g *Guard) inTx(ctx context.Context, q backend.Querier, f func(backend.Querier) error) error {
	if !q.Pool() {
		return f(q)
	}
	tx, err := q.Begin(ctx)
	if err != nil {
		return g.wrapErr(ctx, "begin", err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx)) // the error that matters is f's
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return g.wrapErr(ctx, "commit", err)
	}
	return nil
}

// maxRowDesc bounds fence.RefusedError.Row.
const maxRowDesc = 200

// describeWhere names the rows an Update targeted: its predicate and
// arguments.
func describeWhere(where string, args []any) string {
	d := "where (" + strings.TrimSpace(where) + ")"
	if len(args) > 0 {
		d += " " + fmt.Sprintf("%v", args)
	}
	return truncate(d)
}

// describeKey names the row an Upsert targeted: its key columns and values.
func describeKey(key []Assign) string {
	parts := make([]string, len(key))
	for i, a := range key {
		parts[i] = fmt.Sprintf("%s=%v", a.Column, a.Value)
	}
	return truncate(strings.Join(parts, ", "))
}

func truncate(s string) string {
	if len(s) <= maxRowDesc {
		return s
	}
	cut := maxRowDesc
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
