package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard/etcdstore"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// markBackend is a store of marks the mark tests run against: the flags
// that select it, and how the test reads a mark and sets one up.
type markBackend struct {
	flags []string
	env   []string
	mark  func(t *testing.T, resource string) fence.Token
}

// TestMark: show prints a mark (text and JSON), exits 1 for a resource
// without one; reset refuses a wrong --old (1), a missing --old or a --new
// of another lock (64), and a missing mark (1), leaving the mark as it
// was; with the exact --old it sets --new. For sqlguard's fence table in
// SQLite, PostgreSQL and MySQL, and for guard/etcdstore.
func TestMark(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres", "mysql", "etcd"} {
		t.Run(name, func(t *testing.T) {
			b := newMarkBackend(t, name)
			testMark(t, b)
		})
	}
}

func testMark(t *testing.T, b markBackend) {
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return fk(t, b.env, append(append([]string{"mark"}, args...), b.flags...)...)
	}
	code, stdout, errOut := run("show", "accounts")
	require.Equal(t, ExitOK, code, errOut)
	requireOneLine(t, stdout, "accounts mark 100:ledger")
	code, stdout, errOut = run("show", "--json", "accounts")
	require.Equal(t, ExitOK, code, errOut)
	var j markJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &j))
	assert.Equal(t, "100:ledger", j.FencingToken)
	assert.Equal(t, int64(100), j.Fence)
	assert.Equal(t, "ledger", j.Lock)

	code, _, errOut = run("show", "nothing-here")
	assert.Equal(t, ExitRefused, code, errOut)
	requireOneLine(t, errOut, `resource "nothing-here" has no mark`)

	for _, tc := range []struct {
		args []string
		code int
		line string
	}{
		{[]string{"reset", "--old", "99:ledger", "--new", "5:ledger", "accounts"}, ExitRefused, `the mark of "accounts" is 100:ledger, not --old 99:ledger; nothing changed`},
		{[]string{"reset", "--old", "100:other", "--new", "5:other", "accounts"}, ExitRefused, "nothing changed"},
		{[]string{"reset", "--new", "5:ledger", "accounts"}, ExitUsage, "reset needs --old"},
		{[]string{"reset", "--old", "100:ledger", "--new", "5:other", "accounts"}, ExitUsage, `--new 5:other is for lock "other"`},
		{[]string{"reset", "--old", "100:ledger", "--new", "x", "accounts"}, ExitUsage, "--new: "},
		{[]string{"reset", "--old", "1:ledger", "--new", "5:ledger", "nothing-here"}, ExitRefused, "nothing changed"},
		{[]string{"show", "--old", "100:ledger", "accounts"}, ExitUsage, "--old and --new are for reset"},
		{[]string{"drop", "accounts"}, ExitUsage, "want show RESOURCE or reset"},
	} {
		code, _, errOut := run(tc.args...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		requireOneLine(t, errOut, tc.line)
		assert.Equal(t, "100:ledger", b.mark(t, "accounts").String(), "%v changed the mark", tc.args)
	}

	code, _, errOut = run("reset", "--old", "100:ledger", "--new", "5:ledger", "accounts")
	require.Equal(t, ExitOK, code, errOut)
	requireOneLine(t, errOut, `reset the mark of "accounts" from 100:ledger to 5:ledger`)
	assert.Equal(t, "5:ledger", b.mark(t, "accounts").String())
}

func newMarkBackend(t *testing.T, name string) markBackend {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	if name == "etcd" {
		cl := etcdtest.Start(t)
		st, err := etcdstore.New(etcdtest.Client(t, cl), "marks/")
		require.NoError(t, err)
		_, err = st.Advance(ctx, "accounts", fence.Token{Revision: 100, Lock: "ledger"})
		require.NoError(t, err)
		return markBackend{
			flags: []string{"--etcd-prefix", "marks/"},
			env:   endpointsEnv(cl),
			mark: func(t *testing.T, resource string) fence.Token {
				m, err := st.Mark(ctxT(t, 5*time.Second), resource)
				require.NoError(t, err)
				return m
			},
		}
	}
	driver, dsn, cliDSN := markDSN(t, name)
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	table := "fk_cli_marks_" + randomHex(t)
	g, err := sqlguard.Open(ctx, db, sqlguard.WithTable(table))
	require.NoError(t, err)
	require.NoError(t, g.Migrate(ctx, db))
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP TABLE "+table)
	})
	require.NoError(t, g.Claim(ctx, db, fence.Token{Revision: 100, Lock: "ledger"}, "accounts"))
	return markBackend{
		flags: []string{"--dsn", cliDSN, "--table", table},
		mark: func(t *testing.T, resource string) fence.Token {
			m, err := g.Mark(ctxT(t, 5*time.Second), db, resource)
			require.NoError(t, err)
			return m.Token
		},
	}
}

// markDSN returns the driver and DSN the test opens, and the --dsn that
// names the same database.
func markDSN(t *testing.T, name string) (driver, dsn, cliDSN string) {
	t.Helper()
	switch name {
	case "postgres":
		dsn := testkit.DSN(t, testkit.EnvPostgresDSN)
		return "pgx", dsn, dsn
	case "mysql":
		dsn := testkit.DSN(t, testkit.EnvMySQLDSN)
		return "mysql", dsn, "mysql://" + dsn
	}
	path := filepath.Join(t.TempDir(), "app.db")
	return "sqlite", "file:" + path + "?_pragma=busy_timeout(5000)", "sqlite://" + path
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// TestMarkUsageAndUnreachable: store flags that cannot work exit 64 with
// one line; a database or etcd that does not answer exits 69 within
// --dial-timeout.
func TestMarkUsageAndUnreachable(t *testing.T) {
	dir := t.TempDir()
	unreachable := unusedAddr(t)
	for _, tc := range []struct {
		args []string
		code int
		line string
	}{
		{[]string{"mark", "show", "r"}, ExitUsage, "want one of --dsn"},
		{[]string{"mark", "show", "--dsn", "sqlite://x", "--etcd-prefix", "m/", "r"}, ExitUsage, "want one of --dsn"},
		{[]string{"mark", "show", "--dsn", "oracle://db", "r"}, ExitUsage, `unknown database "oracle"`},
		{[]string{"mark", "show", "--dsn", "sqlite://" + filepath.Join(dir, "absent.db"), "r"}, ExitUsage, "no such file"},
		{[]string{"mark", "show", "--dsn", "postgres://postgres@" + unreachable + "/test?sslmode=disable", "--dial-timeout", "300ms", "r"}, ExitConn, "did not answer within 300ms"},
		{[]string{"mark", "show", "--etcd-prefix", "m/", "--endpoints", unreachable, "--dial-timeout", "300ms", "r"}, ExitConn, "did not answer within 300ms"},
	} {
		begin := time.Now()
		code, _, errOut := fk(t, nil, tc.args...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		requireOneLine(t, errOut, tc.line)
		assert.Less(t, time.Since(begin), 5*time.Second, "%v", tc.args)
	}
	// A bad --table on an existing database.
	path := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	require.NoError(t, db.Ping())
	require.NoError(t, db.Close())
	code, _, errOut := fk(t, nil, "mark", "show", "--dsn", "sqlite://"+path, "--table", "bad name;", "r")
	assert.Equal(t, ExitUsage, code, errOut)
	requireOneLine(t, errOut, "--table")
}
