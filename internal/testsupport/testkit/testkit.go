// Package testkit holds the fixtures that the module's tests share: a log
// buffer safe for concurrent writers, the environment variables that name
// the SQL databases of the tests, the check that keeps Markdown and
// package-doc snippets equal to compiled Example functions (and files),
// and the check of the Markdown's relative links and anchors.
//
// It is for tests only; nothing outside _test.go files imports it.
package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// The environment variables that point tests at outside servers. No test
// uses a server its variable does not name, even one on its default port:
// a test of a service whose variable is unset skips, saying which variable
// to set, unless EnvRequireDB is "1" (CI): then it fails. Tests that start
// servers of their own (etcd, redis-server on free ports) run whenever the
// binary is there.
const (
	// EnvPostgresDSN is a PostgreSQL DSN, for example
	// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
	EnvPostgresDSN = "FENCEKIT_PG_DSN"
	// EnvMySQLDSN is a MySQL or MariaDB DSN, for example
	// root@tcp(127.0.0.1:3306)/test.
	EnvMySQLDSN = "FENCEKIT_MYSQL_DSN"
	// EnvRedisAddr is a Redis server's host:port, for example
	// 127.0.0.1:6379.
	EnvRedisAddr = "FENCEKIT_REDIS_ADDR"
	// EnvRequireDB set to "1" makes a missing or unreachable server, or a
	// missing server binary, a failure instead of a skip.
	EnvRequireDB = "FENCEKIT_REQUIRE_DB"
)

// Service is an outside server that some tests use, named by an
// environment variable.
type Service struct {
	// Name is the service's name, the subject of its skip messages (and
	// so of its group in scripts/test.sh's skip summary).
	Name string
	// Env is the variable that names the server.
	Env string
	// Hint says what Env names, with an example value, for the skip
	// message.
	Hint string
}

// The services of the tests. Their skip messages read "Name: set Env to
// ...", one text per service, which scripts/test.sh's summary groups.
var (
	// PostgreSQL is the database of EnvPostgresDSN.
	PostgreSQL = Service{Name: "PostgreSQL", Env: EnvPostgresDSN, Hint: "a database the tests may write to, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable"}
	// MySQL is the MySQL or MariaDB database of EnvMySQLDSN.
	MySQL = Service{Name: "MySQL", Env: EnvMySQLDSN, Hint: "a database the tests may write to, e.g. root@tcp(127.0.0.1:3306)/test"}
	// PgBouncer is the PgBouncer (pool_mode = transaction, in front of
	// PostgreSQL's server) of EnvPgBouncerDSN.
	PgBouncer = Service{Name: "PgBouncer", Env: EnvPgBouncerDSN, Hint: "a PgBouncer in pool_mode = transaction in front of " + EnvPostgresDSN + "'s server, e.g. postgres://postgres@127.0.0.1:6432/test?sslmode=disable"}
	// Redis is the Redis server of EnvRedisAddr.
	Redis = Service{Name: "Redis", Env: EnvRedisAddr, Hint: "a Redis server's host:port, e.g. 127.0.0.1:6379; tests write only keys of their own"}
)

// Value returns the value of s's variable. When it is unset it skips t
// with "Name: set Env ...", or fails t when EnvRequireDB is "1".
func (s Service) Value(t testing.TB) string {
	t.Helper()
	v := os.Getenv(s.Env)
	if v == "" {
		Need(t, s.Name, fmt.Sprintf("set %s to run these tests (%s)", s.Env, s.Hint))
	}
	return v
}

// Unreachable skips t because the server s's variable names did not
// answer, or fails t when EnvRequireDB is "1".
func (s Service) Unreachable(t testing.TB, err error) {
	t.Helper()
	Need(t, s.Name, fmt.Sprintf("the server %s names does not answer: %v", s.Env, err))
}

// Need skips t with the message "subject: reason", or fails t with it
// when EnvRequireDB is "1": for a test that cannot run without something
// outside the repository (a server, a binary). Subject is short and fixed
// per thing needed ("PostgreSQL", "redis-server"), and reason says how to
// provide it; scripts/test.sh's skip summary groups by subject.
func Need(t testing.TB, subject, reason string) {
	t.Helper()
	if os.Getenv(EnvRequireDB) == "1" {
		t.Fatalf("%s: %s (%s=1)", subject, reason, EnvRequireDB)
		return
	}
	t.Skipf("%s: %s", subject, reason)
}

// serviceOf returns the service whose variable is env.
func serviceOf(t testing.TB, env string) Service {
	t.Helper()
	for _, s := range []Service{PostgreSQL, MySQL, PgBouncer, Redis} {
		if s.Env == env {
			return s
		}
	}
	t.Fatalf("testkit: no service has the variable %s", env)
	return Service{}
}

// DSN returns the value of env, the variable of one of the services
// above (see Service.Value).
func DSN(t testing.TB, env string) string {
	t.Helper()
	return serviceOf(t, env).Value(t)
}

// LogBuffer collects log output from any number of goroutines. The zero
// LogBuffer is ready to use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer; it is safe for concurrent use.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a logger writing JSON records at level and above to b.
func (b *LogBuffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: level}))
}

// Records decodes the JSON records written so far, one per line (see
// Logger). It fails t on a line that is not a JSON object.
func (b *LogBuffer) Records(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// EtcdLeaks are the goleak options of the packages whose tests run
// multi-member embedded etcd clusters. They ignore one goroutine of etcd's
// own: a peer's /version request that reached a member while it stopped
// can block for ever on the member's closed backend (etcd's embed.Close
// does not wait for its peer handlers). Everything of ours still counts.
var EtcdLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"),
}
