package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// summarize runs the program on the recorded stream in testdata/name.
func summarize(t *testing.T, name string, verbose bool) (stdout, stderr string, code int) {
	t.Helper()
	in, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	code, err = run(bytes.NewReader(in), &out, &errw, verbose)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.String(), errw.String(), code
}

// testdata/mixed.jsonl is `go test -json` of four packages: one with a
// failing subtest, one that does not build, one that passes with skipped
// tests (two "PostgreSQL: ..." messages, one "runs go list"), and one whose
// parallel test panics. Its plain `go test` output is what mixed.out holds
// (checked by hand against a plain run of the same packages), but for a
// line a passing test printed to stdout (see the package doc).
func TestMixed(t *testing.T) {
	out, errOut, code := summarize(t, "mixed.jsonl", false)
	want, err := os.ReadFile("testdata/mixed.out")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if wantErr := "# jt/b [jt/b.test]\nb/b_test.go:3:27: declared and not used: x\n"; errOut != wantErr {
		t.Errorf("stderr %q, want the build error %q", errOut, wantErr)
	}
	// The parts a reader and CI rely on, spelled out.
	for _, s := range []string{
		"--- FAIL: TestFail (0.00s)\n    a_test.go:4: loud\n    --- FAIL: TestFail/sub (0.00s)\n        a_test.go:4: boom\nFAIL\nFAIL\tjt/a\t",
		"FAIL\tjt/b [build failed]\n",
		"--- FAIL: TestP (0.00s)\npanic: oops",
		"skipped: 5 tests\n" +
			"  PostgreSQL: 3 tests skipped, set FENCEKIT_PG_DSN to a database these tests may write to\n" +
			"    1 of them: set FENCEKIT_PG_DSN to a database\n" +
			"  Redis: 1 test skipped, set FENCEKIT_REDIS_ADDR\n" +
			"  1 test skipped: runs go list\n" +
			"FAIL\tjt/e\t0.006s\nFAIL\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("stdout lacks %q", s)
		}
	}
	for _, s := range []string{"=== RUN", "--- PASS", "--- SKIP", "PASS\n", "a_test.go:3: quiet"} {
		if strings.Contains(out, s) {
			t.Errorf("stdout has %q, which plain go test does not print", s)
		}
	}
	if !strings.HasSuffix(out, "FAIL\tjt/e\t0.006s\nFAIL\n") {
		t.Errorf("stdout does not end as go test's does: %q", out[max(0, len(out)-80):])
	}
}

// A passing run exits 0 and ends with the last package's ok line, the
// skip summary just before it.
func TestPass(t *testing.T) {
	out, errOut, code := summarize(t, "pass.jsonl", false)
	want := "skipped: 3 tests\n" +
		"  PostgreSQL: 2 tests skipped, set FENCEKIT_PG_DSN to a database these tests may write to\n" +
		"  1 test skipped: runs go list\n" +
		"ok  \tjt/c\t0.005s\n"
	if out != want || errOut != "" || code != 0 {
		t.Errorf("got %q, %q, %d; want %q, \"\", 0", out, errOut, code, want)
	}
}

// -v writes every line of the tests' output, as go test -v does, and
// still the summary before the closing line.
func TestVerbose(t *testing.T) {
	out, _, code := summarize(t, "pass.jsonl", true)
	for _, s := range []string{"=== RUN   TestC\n--- PASS: TestC (0.00s)\n", "    c_test.go:5: before\n", "--- SKIP: TestList (0.00s)\nPASS\nskipped: 3 tests\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("stdout lacks %q:\n%s", s, out)
		}
	}
	if code != 0 || !strings.HasSuffix(out, "\nok  \tjt/c\t0.005s\n") {
		t.Errorf("exit %d, output %q", code, out)
	}
}

// Lines that are not events pass through; with nothing skipped there is
// no summary; with no events at all the status is 0.
func TestPassThrough(t *testing.T) {
	in := "go: warning: something\n" +
		`{"Action":"start","Package":"p"}` + "\n" +
		`{"Action":"output","Package":"p","Output":"?   \tp\t[no test files]\n"}` + "\n" +
		`{"Action":"skip","Package":"p"}` + "\n"
	var out, errw bytes.Buffer
	code, err := run(strings.NewReader(in), &out, &errw, false)
	if err != nil || code != 0 || out.String() != "go: warning: something\n?   \tp\t[no test files]\n" {
		t.Errorf("run = %d, %v, %q", code, err, out.String())
	}
}

func TestSummary(t *testing.T) {
	if s := Summary(nil); s != "" {
		t.Errorf("Summary(nil) = %q", s)
	}
	got := Summary([]string{
		"MySQL: set FENCEKIT_MYSQL_DSN to a database",
		"PostgreSQL: set FENCEKIT_PG_DSN to a database",
		"PostgreSQL: set FENCEKIT_PG_DSN to a database",
		"modernc.org/sqlite v1 does not end a busy wait (v1.62.0 does): the others cover it",
		"see http://example.com: for why",
	})
	want := "skipped: 5 tests\n" +
		"  PostgreSQL: 2 tests skipped, set FENCEKIT_PG_DSN to a database\n" +
		"  MySQL: 1 test skipped, set FENCEKIT_MYSQL_DSN to a database\n" +
		"  1 test skipped: modernc.org/sqlite v1 does not end a busy wait (v1.62.0 does): the others cover it\n" +
		"  1 test skipped: see http://example.com: for why\n"
	if got != want {
		t.Errorf("Summary:\n%s\nwant:\n%s", got, want)
	}
}
