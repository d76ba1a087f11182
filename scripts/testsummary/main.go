// Command testsummary reads `go test -json` on stdin and writes what plain
// `go test` would have written (each package's ok / FAIL line, the output
// of failing tests with their --- FAIL lines, build errors on stderr, and a
// closing FAIL when anything failed), plus a summary of the tests that
// skipped and why, grouped, which plain go test shows only with -v.
// scripts/test.sh, the README's test command, pipes go test into it:
//
//	go test -json ./... | go run ./scripts/testsummary
//	go test -json -v ./... | go run ./scripts/testsummary -v   # everything, as go test -v
//
// The summary comes just before the last package's result line, so that
// the run still ends as go test's does (the last ok / FAIL line, then FAIL
// when something failed): scripts and CI that read go test's closing lines
// read the same lines. It is written only when a test skipped:
//
//	skipped: 158 tests
//	  PostgreSQL: 120 tests skipped, set FENCEKIT_PG_DSN to a database these tests may write to ...
//	  1 test skipped: runs go list
//
// A skip message of the form "Subject: reason" (a short subject before the
// first colon, as testkit's service helpers write: "PostgreSQL: set
// FENCEKIT_PG_DSN ...") is grouped by its subject; any other message is
// its own group. Groups are listed by count, most first.
//
// Without -v, output that a passing test printed is dropped, as plain go
// test drops t.Log output of passing tests (plain go test would show what
// such a test wrote to stdout directly; run with -v to see it).
//
// Exit status: 1 when a package or a build failed, 2 when reading or
// writing failed, 0 otherwise. scripts/test.sh exits with go test's own
// status.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "write every test's output, as go test -v does")
	flag.Parse()
	code, err := run(os.Stdin, os.Stdout, os.Stderr, *verbose)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, plus
// the build events of cmd/go).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// test is one test or subtest of a package, with its output.
type test struct {
	name     string
	parent   *test
	children []*test
	header   string   // its "--- FAIL: ..." line
	lines    []string // its own output lines, without go test -v's framing
	action   string   // pass, fail or skip once it ended
}

// pkg is the state of one package's run.
type pkg struct {
	tests map[string]*test
	top   []*test // top-level tests, in the order they started
}

// summary turns a `go test -json` stream into plain go test output.
type summary struct {
	out, errw io.Writer
	verbose   bool
	pkgs      map[string]*pkg
	held      string // the latest package's result line, written last
	failed    bool
	skips     []string // the first line of every skipped test's message
}

// run reads go test -json from r, writes the output to out (and build
// errors to errw), and returns the exit status: 1 when anything failed.
func run(r io.Reader, out, errw io.Writer, verbose bool) (int, error) {
	bw := bufio.NewWriter(out)
	s := &summary{out: bw, errw: errw, verbose: verbose, pkgs: map[string]*pkg{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			s.write(string(line) + "\n") // not an event: pass it through
			continue
		}
		s.handle(ev)
		// A package's output ends with its result line: show it at once
		// on a terminal (go test prints a package as it finishes).
		if ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip") {
			if err := bw.Flush(); err != nil {
				return 2, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 2, err
	}
	s.finish()
	if err := bw.Flush(); err != nil {
		return 2, err
	}
	if s.failed {
		return 1, nil
	}
	return 0, nil
}

// resultLine matches a package's closing line: "ok  \tpkg\t0.1s",
// "FAIL\tpkg\t0.1s", "FAIL\tpkg [build failed]", "?   \tpkg\t[no test files]".
var resultLine = regexp.MustCompile(`^(ok  |FAIL|\?   )\t`)

// write writes text, holding a package's result line back until the next
// output: the last one is written after the skip summary.
func (s *summary) write(text string) {
	if resultLine.MatchString(text) {
		s.flushHeld()
		s.held = text
		return
	}
	s.flushHeld()
	io.WriteString(s.out, text)
}

func (s *summary) flushHeld() {
	if s.held != "" {
		io.WriteString(s.out, s.held)
		s.held = ""
	}
}

func (s *summary) pkg(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		p = &pkg{tests: map[string]*test{}}
		s.pkgs[name] = p
	}
	return p
}

// test returns the state of test name in p, creating it (and linking it
// to its parent, the longest known prefix at a slash) on first sight.
func (p *pkg) test(name string) *test {
	if t := p.tests[name]; t != nil {
		return t
	}
	t := &test{name: name}
	p.tests[name] = t
	for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name[:i], '/') {
		if parent := p.tests[name[:i]]; parent != nil {
			t.parent = parent
			parent.children = append(parent.children, t)
			return t
		}
	}
	p.top = append(p.top, t)
	return t
}

func (s *summary) handle(ev event) {
	switch ev.Action {
	case "build-output":
		io.WriteString(s.errw, ev.Output) // as go test: build errors on stderr
		return
	case "build-fail":
		s.failed = true
		return
	}
	if ev.Test == "" {
		s.handlePackage(ev)
		return
	}
	p := s.pkg(ev.Package)
	t := p.test(ev.Test)
	switch ev.Action {
	case "output":
		if s.verbose {
			s.write(ev.Output)
		}
		t.add(ev.Output)
	case "pass", "fail", "skip":
		t.action = ev.Action
		if ev.Action == "skip" {
			s.skips = append(s.skips, t.skipMessage())
		}
		if t.parent == nil {
			if ev.Action == "fail" && !s.verbose {
				s.writeFailure(t, 0)
			}
			p.forget(t)
		}
	}
}

// framing matches the lines go test -json adds to a test's output that
// plain go test does not print.
var framing = regexp.MustCompile(`^=== (RUN|PAUSE|CONT|NAME)\b`)

// header matches a test's closing line, at any depth.
var header = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): `)

// add records one output event of t.
func (t *test) add(text string) {
	for line := range strings.Lines(text) {
		switch {
		case framing.MatchString(line):
		case header.MatchString(line) && t.header == "":
			t.header = strings.TrimLeft(line, " ")
		default:
			t.lines = append(t.lines, line)
		}
	}
}

// location matches the "file_test.go:12: " that t.Log and t.Skip put
// before a message.
var location = regexp.MustCompile(`^ {4}\S+\.go:\d+: `)

// skipMessage returns the first line of the last message t logged (its
// t.Skip reason), without the file and line.
func (t *test) skipMessage() string {
	for i := len(t.lines) - 1; i >= 0; i-- {
		if loc := location.FindString(t.lines[i]); loc != "" {
			return strings.TrimSpace(t.lines[i][len(loc):])
		}
	}
	return "(no message)"
}

// writeFailure writes a failed test as plain go test does: its --- FAIL
// line, its output, then its failed subtests, each level indented by
// four spaces.
func (s *summary) writeFailure(t *test, depth int) {
	indent := strings.Repeat("    ", depth)
	if t.header != "" {
		s.write(indent + t.header)
	}
	for _, l := range t.lines {
		if strings.TrimSpace(l) == "" {
			s.write(l)
		} else {
			s.write(indent + l)
		}
	}
	for _, c := range t.children {
		if c.action == "fail" || c.action == "" {
			s.writeFailure(c, depth+1)
		}
	}
}

// forget drops a finished top-level test and its subtests.
func (p *pkg) forget(t *test) {
	var drop func(*test)
	drop = func(t *test) {
		delete(p.tests, t.name)
		for _, c := range t.children {
			drop(c)
		}
	}
	drop(t)
	p.top = slices.DeleteFunc(p.top, func(x *test) bool { return x == t })
}

// packageNoise matches the package-level lines that plain go test does not
// print: the test binary's PASS, its "no tests to run" warning and its
// coverage line (go test puts those on the result line).
var packageNoise = regexp.MustCompile(`^(PASS|testing: warning: no tests to run|coverage: .*)\n?$`)

func (s *summary) handlePackage(ev event) {
	switch ev.Action {
	case "output":
		if s.verbose || !packageNoise.MatchString(ev.Output) {
			s.write(ev.Output)
		}
	case "fail", "pass", "skip":
		p := s.pkg(ev.Package)
		if ev.Action == "fail" {
			s.failed = true
		}
		// Tests that never ended (a panic, a timeout) failed with their
		// package: show what they wrote.
		if !s.verbose {
			for _, t := range p.top {
				s.writeFailure(t, 0)
			}
		}
		delete(s.pkgs, ev.Package)
	}
}

// finish writes the skip summary, then the last package's result line and
// go test's closing FAIL.
func (s *summary) finish() {
	// A package cut off mid-run (go test killed) is shown as it stands.
	for _, p := range s.pkgs {
		for _, t := range p.top {
			s.writeFailure(t, 0)
		}
	}
	held := s.held
	s.held = ""
	io.WriteString(s.out, Summary(s.skips))
	io.WriteString(s.out, held)
	if s.failed {
		io.WriteString(s.out, "FAIL\n")
	}
}

// subject matches a skip message's grouping subject: a short phrase before
// the first ": " ("PostgreSQL: set FENCEKIT_PG_DSN ...").
var subject = regexp.MustCompile(`^([^:()\[\]]{1,40}): (.+)$`)

// Summary returns the skip summary of messages (one per skipped test), or
// "" when there are none.
func Summary(messages []string) string {
	if len(messages) == 0 {
		return ""
	}
	type group struct {
		subject string
		count   int
		reasons map[string]int
	}
	groups := map[string]*group{}
	var order []*group
	for _, m := range messages {
		key, reason := m, ""
		if sm := subject.FindStringSubmatch(m); sm != nil {
			key, reason = sm[1], sm[2]
		}
		g := groups[key]
		if g == nil {
			g = &group{subject: key, reasons: map[string]int{}}
			groups[key] = g
			order = append(order, g)
		}
		g.count++
		g.reasons[reason]++
	}
	slices.SortStableFunc(order, func(a, b *group) int { return b.count - a.count })
	var b strings.Builder
	fmt.Fprintf(&b, "skipped: %s\n", plural(len(messages)))
	for _, g := range order {
		reasons := sortedReasons(g.reasons)
		if len(reasons) == 1 && reasons[0] == "" {
			fmt.Fprintf(&b, "  %s skipped: %s\n", plural(g.count), g.subject)
			continue
		}
		fmt.Fprintf(&b, "  %s: %s skipped, %s\n", g.subject, plural(g.count), reasons[0])
		for _, r := range reasons[1:] {
			fmt.Fprintf(&b, "    %d of them: %s\n", g.reasons[r], r)
		}
	}
	return b.String()
}

// sortedReasons returns the keys of counts, most frequent first, then in
// lexical order.
func sortedReasons(counts map[string]int) []string {
	var rs []string
	for r := range counts {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	return rs
}

func plural(n int) string {
	if n == 1 {
		return "1 test"
	}
	return fmt.Sprintf("%d tests", n)
}
