package testkit_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLogBufferConcurrent(t *testing.T) {
	var b testkit.LogBuffer
	log := b.Logger(-4)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); log.Info("x", "i", i) }()
	}
	wg.Wait()
	recs := b.Records(t)
	if len(recs) != 8 {
		t.Fatalf("got %d records, want 8", len(recs))
	}
	if recs[0]["msg"] != "x" {
		t.Errorf("record %v, want msg x", recs[0])
	}
}

func TestSnippets(t *testing.T) {
	body := "a := 1\na++\nfmt.Println(a)\n// Output: 2"
	md := "# t\n\n<!-- example snip.ExampleHello -->\n```go\n" + body + "\n```\n"
	snips, err := testkit.Snippets(md)
	if err != nil || len(snips) != 1 || snips[0].Code != body || snips[0].Example != "ExampleHello" || snips[0].Line != 3 {
		t.Fatalf("Snippets = %+v, %v", snips, err)
	}
	if _, err := testkit.Snippets("<!-- example snip.ExampleHello -->\ntext\n"); err == nil {
		t.Error("a marker without a code block: got nil error")
	}
	bodies, err := testkit.ExampleBodies("testdata/snip")
	if err != nil {
		t.Fatal(err)
	}
	if bodies["ExampleHello"] != body {
		t.Errorf("ExampleHello's body = %q, want %q", bodies["ExampleHello"], body)
	}

	dir := t.TempDir()
	good := filepath.Join(dir, "good.md")
	os.WriteFile(good, []byte(md), 0o600)
	if n := testkit.CheckSnippets(t, good, "snip", "testdata/snip"); n != 1 {
		t.Errorf("checked %d snippets, want 1", n)
	}
	if n := testkit.CheckDocSnippets(t, "testdata/snip"); n != 1 {
		t.Errorf("checked %d doc blocks, want 1", n)
	}

	// A drifted snippet fails the check.
	bad := filepath.Join(dir, "bad.md")
	os.WriteFile(bad, []byte("<!-- example snip.ExampleHello -->\n```go\na := 2\n```\n"), 0o600)
	rec := &recorder{TB: t}
	testkit.CheckSnippets(rec, bad, "snip", "testdata/snip")
	if !rec.failed {
		t.Error("a snippet that differs from its Example passed")
	}

	// An excerpt may skip lines, but not change them.
	ex := filepath.Join(dir, "excerpt.md")
	os.WriteFile(ex, []byte("<!-- excerpt snip.ExampleHello -->\n```go\na := 1\n// ...\n// Output: 2\n```\n"), 0o600)
	if n := testkit.CheckSnippets(t, ex, "snip", "testdata/snip"); n != 1 {
		t.Errorf("checked %d excerpts, want 1", n)
	}
	os.WriteFile(ex, []byte("<!-- excerpt snip.ExampleHello -->\n```go\na := 3\n// ...\n```\n"), 0o600)
	rec = &recorder{TB: t}
	testkit.CheckSnippets(rec, ex, "snip", "testdata/snip")
	if !rec.failed {
		t.Error("an excerpt with a changed line passed")
	}
}

// recorder records failures instead of failing the test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Helper()               {}

// skipRecorder is a testing.TB whose Skipf and Fatalf record their message
// (and return: Value and Need then go on, which the test ignores).
type skipRecorder struct {
	testing.TB
	skipped, failed string
}

func (r *skipRecorder) Skipf(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }

func (r *skipRecorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// A service whose variable is unset is never guessed at: its tests skip
// with "Name: set Env ...", the text scripts/test.sh's summary groups by,
// or fail with FENCEKIT_REQUIRE_DB=1.
func TestServiceSkips(t *testing.T) {
	for _, s := range []testkit.Service{testkit.PostgreSQL, testkit.MySQL, testkit.PgBouncer, testkit.Redis} {
		t.Setenv(s.Env, "")
		t.Setenv(testkit.EnvRequireDB, "")
		r := &skipRecorder{TB: t}
		if v := s.Value(r); v != "" || r.failed != "" || !strings.HasPrefix(r.skipped, s.Name+": set "+s.Env+" to run these tests (") {
			t.Errorf("%s unset: value %q, skipped %q, failed %q", s.Env, v, r.skipped, r.failed)
		}
		t.Setenv(testkit.EnvRequireDB, "1")
		r = &skipRecorder{TB: t}
		if s.Value(r); r.skipped != "" || !strings.Contains(r.failed, s.Env) || !strings.Contains(r.failed, testkit.EnvRequireDB+"=1") {
			t.Errorf("%s unset, %s=1: skipped %q, failed %q", s.Env, testkit.EnvRequireDB, r.skipped, r.failed)
		}
		t.Setenv(s.Env, "somewhere")
		if v := s.Value(&skipRecorder{TB: t}); v != "somewhere" {
			t.Errorf("%s=somewhere: value %q", s.Env, v)
		}
	}
	if v := testkit.DSN(&skipRecorder{TB: t}, testkit.EnvPostgresDSN); v != "somewhere" {
		t.Errorf("DSN = %q", v)
	}
	t.Setenv(testkit.EnvRequireDB, "")
	r := &skipRecorder{TB: t}
	testkit.Redis.Unreachable(r, errors.New("connection refused"))
	if r.skipped != "Redis: the server FENCEKIT_REDIS_ADDR names does not answer: connection refused" {
		t.Errorf("Unreachable skipped %q", r.skipped)
	}
}
