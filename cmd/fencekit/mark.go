package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/sqlguard"
)

const markHelp = `Show or reset the mark of a fenced resource: the highest fencing token it
has accepted. Marks live in sqlguard's fence table in a database (--dsn) or
in etcd, kept by guard/etcdstore under a key prefix (--etcd-prefix, with the
connection flags).

  fencekit mark show RESOURCE
  fencekit mark reset --old REV:LOCK --new REV:LOCK RESOURCE

reset is the break-glass for a poisoned mark (a token no acquisition made,
say from an etcd cluster that was replaced, which refuses every real holder
as stale). It sets the mark to --new only if it is exactly --old now, in one
statement (SQL) or transaction (etcd), the compare the libraries' ResetMark
does; otherwise it refuses and changes nothing. --old is required: read it
with "mark show". --new must be for the same lock. A reset can let a
superseded holder write again: pick --new as the current holder's token (or
lower) and stop the writers of the old mark first.

--dsn takes a scheme naming the database (each driver can be left out of
a build with the tag fencekit_nopostgres, fencekit_nomysql or
fencekit_nosqlite, for a smaller binary):
  postgres://USER@HOST:PORT/DB?sslmode=disable   (also postgresql://; pgx)
  mysql://USER:PASS@tcp(HOST:PORT)/DB            (go-sql-driver/mysql's DSN after mysql://)
  sqlite://PATH                                  (an existing database file)

Exit codes: 0 shown / reset; 1 no mark for RESOURCE, or (reset) the mark is
not exactly --old: nothing changed; 64 usage error; 69 the database or etcd
could not be reached or did not answer (a reset's outcome is then unknown:
"mark show" tells).`

type markFlags struct {
	conn       connFlags
	dsn        string
	table      string
	etcdPrefix string
	old, next  string
	asJSON     bool
}

// markJSON is "mark show --json" output.
type markJSON struct {
	Resource     string `json:"resource"`
	FencingToken string `json:"fencing_token"`
	Lock         string `json:"lock"`
	Fence        int64  `json:"fence"`
	Seq          *int64 `json:"seq,omitempty"`
	Cluster      string `json:"cluster,omitempty"`
}

func cmdMark(args []string, e *Env) int {
	var f markFlags
	fs := newFlagSet("mark", markHelp+"\n\n"+connHelp)
	f.conn.register(fs, e.Getenv, false)
	dsnDef := e.Getenv("FENCEKIT_MARK_DSN")
	fs.StringVar(&f.dsn, "dsn", "", "database holding sqlguard's fence table: postgres://, mysql:// or sqlite:// (env FENCEKIT_MARK_DSN)")
	fs.StringVar(&f.table, "table", sqlguard.DefaultTable, "sqlguard's fence table")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", "", "etcd key prefix of guard/etcdstore's marks (instead of --dsn)")
	fs.StringVar(&f.old, "old", "", "reset: the mark as it is now, REV:LOCK (required)")
	fs.StringVar(&f.next, "new", "", "reset: the mark to set, REV:LOCK of the same lock (required)")
	fs.BoolVar(&f.asJSON, "json", false, "show: print JSON {resource, fencing_token, lock, fence, seq, cluster}")
	pos, err := parse(fs, args, e)
	if err != nil {
		return usageFail(e, "mark", err)
	}
	if f.dsn == "" && f.etcdPrefix == "" {
		f.dsn = dsnDef // the variable, hidden from --help, as it may hold a password
	}
	op, resource, old, next, err := f.check(pos)
	if err != nil {
		return usageFail(e, "mark", err)
	}
	st, closeStore, code := f.open(e)
	if code >= 0 {
		return code
	}
	defer closeStore()
	ctx, cancel := context.WithTimeout(context.Background(), f.conn.commandTimeout)
	defer cancel()
	if op == "show" {
		return f.show(ctx, st, resource, e)
	}
	return f.reset(ctx, st, resource, old, next, e)
}

// check validates the arguments; errors are usage errors.
func (f *markFlags) check(pos []string) (op, resource string, old, next fence.Token, err error) {
	if len(pos) != 2 || (pos[0] != "show" && pos[0] != "reset") {
		return "", "", old, next, errors.New("want show RESOURCE or reset --old REV:LOCK --new REV:LOCK RESOURCE")
	}
	op, resource = pos[0], pos[1]
	switch {
	case resource == "":
		return "", "", old, next, errors.New("RESOURCE is empty")
	case (f.dsn == "") == (f.etcdPrefix == ""):
		return "", "", old, next, errors.New("want one of --dsn (sqlguard) and --etcd-prefix (guard/etcdstore)")
	case op == "show" && (f.old != "" || f.next != ""):
		return "", "", old, next, errors.New("--old and --new are for reset")
	case op == "reset" && (f.old == "" || f.next == ""):
		return "", "", old, next, errors.New("reset needs --old (the mark as it is now, from 'mark show') and --new")
	}
	if op == "reset" {
		if old, next, err = f.tokens(); err != nil {
			return "", "", old, next, err
		}
	}
	if f.etcdPrefix != "" {
		return op, resource, old, next, f.conn.check()
	}
	return op, resource, old, next, nil
}

// tokens parses --old and --new, which must be for the same lock.
func (f *markFlags) tokens() (old, next fence.Token, err error) {
	if old, err = fence.Parse(f.old); err != nil {
		return old, next, fmt.Errorf("--old: %w", err)
	}
	if next, err = fence.Parse(f.next); err != nil {
		return old, next, fmt.Errorf("--new: %w", err)
	}
	if old.Lock != next.Lock {
		return old, next, fmt.Errorf("--new %s is for lock %q, --old %s for lock %q: a mark stays bound to its lock", next, next.Lock, old, old.Lock)
	}
	return old, next, nil
}

// markStore is a store of marks: sqlguard's fence table or etcdstore.
type markStore interface {
	show(ctx context.Context, resource string) (markJSON, error)
	reset(ctx context.Context, resource string, old, next fence.Token) error
}

// open opens the store; on failure it returns the exit code.
func (f *markFlags) open(e *Env) (markStore, func(), int) {
	if f.etcdPrefix != "" {
		cli, err := f.conn.connect(e)
		if err != nil {
			return nil, nil, fail(e, "mark", ExitConn, err)
		}
		s, err := etcdstore.New(cli, f.etcdPrefix)
		if err != nil {
			cli.Close()
			return nil, nil, fail(e, "mark", ExitUsage, err)
		}
		return etcdMarks{s}, func() { cli.Close() }, -1
	}
	driver, dsn, err := sqlDSN(f.dsn)
	if err != nil {
		return nil, nil, usageFail(e, "mark", err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, nil, usageFail(e, "mark", fmt.Errorf("--dsn: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.conn.dialTimeout)
	defer cancel()
	g, err := sqlguard.Open(ctx, db, sqlguard.WithTable(f.table))
	switch {
	case errors.Is(err, sqlguard.ErrInvalid):
		db.Close()
		return nil, nil, usageFail(e, "mark", fmt.Errorf("--table: %w", err))
	case err != nil:
		db.Close()
		return nil, nil, fail(e, "mark", ExitConn, fmt.Errorf("database (%s) did not answer within %v (--dial-timeout): %w", driver, f.conn.dialTimeout, err))
	}
	return sqlMarks{g, db}, func() { db.Close() }, -1
}

// sqlDSN splits --dsn into a database/sql driver name and its DSN.
func sqlDSN(s string) (driver, dsn string, err error) {
	driver, dsn, err = splitDSN(s)
	if err == nil && !slices.Contains(sql.Drivers(), driver) {
		return "", "", fmt.Errorf("--dsn: this fencekit was built without the %s driver (build tag fencekit_no%s)", driver, driverTag[driver])
	}
	return driver, dsn, err
}

// driverTag names the build tag that leaves each driver out.
var driverTag = map[string]string{"pgx": "postgres", "mysql": "mysql", "sqlite": "sqlite"}

func splitDSN(s string) (driver, dsn string, err error) {
	switch {
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		return "pgx", s, nil
	case strings.HasPrefix(s, "mysql://"):
		return "mysql", strings.TrimPrefix(s, "mysql://"), nil
	case strings.HasPrefix(s, "sqlite://"):
		path := strings.TrimPrefix(s, "sqlite://")
		if path == "" || strings.Contains(path, "?") {
			return "", "", errors.New("--dsn sqlite://PATH: want a file path, no options")
		}
		if _, err := os.Stat(path); err != nil {
			return "", "", fmt.Errorf("--dsn sqlite://PATH: %w", err)
		}
		// mode=rw: an absent file is an error, not a new database.
		return "sqlite", "file:" + path + "?mode=rw&_pragma=busy_timeout(5000)", nil
	}
	scheme, _, _ := strings.Cut(s, "://")
	return "", "", fmt.Errorf("--dsn: unknown database %q: want postgres://, postgresql://, mysql:// or sqlite://", scheme)
}

func (f *markFlags) show(ctx context.Context, st markStore, resource string, e *Env) int {
	m, err := st.show(ctx, resource)
	if errors.Is(err, fence.ErrNoMark) {
		fmt.Fprintf(e.Stderr, "fencekit mark: resource %q has no mark\n", resource)
		return ExitRefused
	}
	if err != nil {
		return fail(e, "mark", markCode(err), err)
	}
	if f.asJSON {
		return writeJSON(e, "mark", m)
	}
	line := fmt.Sprintf("%s mark %s", m.Resource, m.FencingToken)
	if m.Seq != nil {
		line += fmt.Sprintf(" seq %d", *m.Seq)
	}
	if m.Cluster != "" {
		line += " cluster " + m.Cluster
	}
	fmt.Fprintln(e.Stdout, line)
	return ExitOK
}

func (f *markFlags) reset(ctx context.Context, st markStore, resource string, old, next fence.Token, e *Env) int {
	err := st.reset(ctx, resource, old, next)
	switch {
	case err == nil:
		fmt.Fprintf(e.Stderr, "%s fencekit mark: reset the mark of %q from %s to %s\n", time.Now().UTC().Format(time.RFC3339), resource, old, next)
		return ExitOK
	case errors.Is(err, fence.ErrMarkChanged):
		return refusedReset(ctx, e, st, resource, old)
	case errors.Is(err, fence.ErrNoMark):
		fmt.Fprintf(e.Stderr, "fencekit mark: refused: resource %q has no mark; nothing changed\n", resource)
		return ExitRefused
	}
	return fail(e, "mark", markCode(err), err)
}

// refusedReset reports a reset refused because the mark is not old,
// naming the mark as read again now (the refusal carries it only in its
// text).
func refusedReset(ctx context.Context, e *Env, st markStore, resource string, old fence.Token) int {
	now := "none"
	if m, err := st.show(ctx, resource); err == nil {
		now = m.FencingToken
	} else if !errors.Is(err, fence.ErrNoMark) {
		now = "unknown (" + err.Error() + ")"
	}
	fmt.Fprintf(e.Stderr, "fencekit mark: refused: the mark of %q is %s, not --old %s; nothing changed\n", resource, now, old)
	return ExitRefused
}

// markCode is the exit code of a store's error: a usage error for an
// argument the library refuses before any I/O, else a connection error.
func markCode(err error) int {
	if errors.Is(err, sqlguard.ErrInvalid) || errors.Is(err, fence.ErrInvalid) {
		return ExitUsage
	}
	return ExitConn
}

// sqlMarks is sqlguard's fence table.
type sqlMarks struct {
	g  *sqlguard.Guard
	db *sql.DB
}

func (s sqlMarks) show(ctx context.Context, resource string) (markJSON, error) {
	m, err := s.g.Mark(ctx, s.db, resource)
	if err != nil {
		return markJSON{}, err
	}
	return markJSON{Resource: resource, FencingToken: m.Token.String(), Lock: m.Token.Lock, Fence: m.Token.Revision, Seq: &m.Seq, Cluster: m.Cluster}, nil
}

func (s sqlMarks) reset(ctx context.Context, resource string, old, next fence.Token) error {
	return s.g.ResetMark(ctx, s.db, resource, old, next)
}

// etcdMarks is guard/etcdstore's marks.
type etcdMarks struct{ s *etcdstore.Store }

func (s etcdMarks) show(ctx context.Context, resource string) (markJSON, error) {
	t, err := s.s.Mark(ctx, resource)
	if err != nil {
		return markJSON{}, err
	}
	return markJSON{Resource: resource, FencingToken: t.String(), Lock: t.Lock, Fence: t.Revision}, nil
}

func (s etcdMarks) reset(ctx context.Context, resource string, old, next fence.Token) error {
	return s.s.ResetMark(ctx, resource, old, next)
}
