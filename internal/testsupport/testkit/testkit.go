// Package testkit holds the fixtures that the module's tests share: a log
// buffer safe for concurrent writers, the environment variables that name
// the SQL databases of the tests, and the check that keeps README and
// package-doc snippets equal to compiled Example functions.
//
// It is for tests only; nothing outside _test.go files imports it.
package testkit

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// The environment variables that point tests at real databases. Tests of
// a database skip when its variable is unset, unless EnvRequireDB is "1"
// (CI): then they fail.
const (
	// EnvPostgresDSN is a PostgreSQL DSN, for example
	// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
	EnvPostgresDSN = "FENCEKIT_PG_DSN"
	// EnvMySQLDSN is a MySQL or MariaDB DSN, for example
	// root@tcp(127.0.0.1:3306)/test.
	EnvMySQLDSN = "FENCEKIT_MYSQL_DSN"
	// EnvRequireDB set to "1" makes a missing DSN a failure, not a skip.
	EnvRequireDB = "FENCEKIT_REQUIRE_DB"
)

// DSN returns the DSN in the environment variable env. When it is unset
// it skips t, saying how to run the test, or fails t when EnvRequireDB is
// "1".
func DSN(t testing.TB, env string) string {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		if os.Getenv(EnvRequireDB) == "1" {
			t.Fatalf("%s is not set and %s=1", env, EnvRequireDB)
		}
		t.Skipf("%s is not set: set it to a database this test may write to, to run it", env)
	}
	return dsn
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
