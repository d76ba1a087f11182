package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
)

var (
	// ErrViolation is matched by the error of Report.Err: the history
	// breaks a rule.
	ErrViolation = errors.New("check: history breaks a rule")
	// ErrInvalidInput is matched by the errors of Check for input that
	// is not a history, such as a token below 1.
	ErrInvalidInput = errors.New("check: invalid input")
)

// Write is one write a resource applied: the fencing token it carried
// (the token's revision, fence.Token.Revision) and the element it added.
// Elements name writes: give each write its own.
type Write struct {
	Token int64 `json:"t"`
	Elem  int64 `json:"e"`
}

// Rule is one of the rules Check checks.
type Rule int

// The rules.
const (
	// TokenBackwards: no applied write carries a token lower than one
	// applied before it.
	TokenBackwards Rule = iota + 1
	// TokenInterleaved: the writes under one token are contiguous; no
	// token writes again after another token wrote.
	TokenInterleaved
	// AckedLost: every acknowledged write is in the final state.
	AckedLost
)

// String returns the rule's name: "token-backwards", "token-interleaved"
// or "acked-lost".
func (r Rule) String() string {
	switch r {
	case TokenBackwards:
		return "token-backwards"
	case TokenInterleaved:
		return "token-interleaved"
	case AckedLost:
		return "acked-lost"
	}
	return "rule(" + strconv.Itoa(int(r)) + ")"
}

// Problem is one broken rule at one place in a history.
type Problem struct {
	// Rule is the rule broken.
	Rule Rule
	// Index is the position of the write in the applied history, or -1
	// for AckedLost.
	Index int
	// Elem is the element of the write.
	Elem int64
	// Token is the write's token (0 for AckedLost).
	Token int64
	// Prev is, for TokenBackwards, the highest token applied before; for
	// TokenInterleaved, the token of the write just before.
	Prev int64
}

// String describes the problem in one line.
func (p Problem) String() string {
	switch p.Rule {
	case TokenBackwards:
		return fmt.Sprintf("%s: write %d (elem %d) carries token %d after token %d", p.Rule, p.Index, p.Elem, p.Token, p.Prev)
	case TokenInterleaved:
		return fmt.Sprintf("%s: write %d (elem %d): token %d writes again after token %d", p.Rule, p.Index, p.Elem, p.Token, p.Prev)
	case AckedLost:
		return fmt.Sprintf("%s: acknowledged elem %d is not in the final state", p.Rule, p.Elem)
	}
	return fmt.Sprintf("%s: write %d (elem %d, token %d)", p.Rule, p.Index, p.Elem, p.Token)
}

// MaxProblems is how many problems a Report lists; it counts them all.
const MaxProblems = 10

// Report is what Check found.
type Report struct {
	// Applied, Acked and Final count the writes applied, the writes
	// acknowledged, and the elements of the final state.
	Applied, Acked, Final int
	// Tokens counts the distinct tokens that wrote.
	Tokens int
	// Backwards counts the applied writes breaking TokenBackwards, and
	// Interleaved those breaking TokenInterleaved.
	Backwards, Interleaved int
	// Violations counts the applied writes breaking either rule, once
	// each.
	Violations int
	// Lost counts the acknowledged elements missing from the final state
	// (AckedLost).
	Lost int
	// Problems lists the first MaxProblems problems: those of the applied
	// history in its order, then lost elements in the order of their
	// acknowledgement.
	Problems []Problem
}

// OK reports whether no rule is broken.
func (r *Report) OK() bool { return r.Violations == 0 && r.Lost == 0 }

// Err returns nil when no rule is broken, and otherwise a *ViolationError
// naming the first problem.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	return &ViolationError{Report: r}
}

// String summarizes the report in one line, naming the first problem.
func (r *Report) String() string {
	s := fmt.Sprintf("applied=%d acked=%d final=%d tokens=%d violations=%d lost=%d",
		r.Applied, r.Acked, r.Final, r.Tokens, r.Violations, r.Lost)
	if len(r.Problems) > 0 {
		s += "; first: " + r.Problems[0].String()
	}
	return s
}

// ViolationError reports a history that breaks a rule. It matches
// ErrViolation.
type ViolationError struct {
	// Report is the whole report.
	Report *Report
}

// Error names the first problem and counts them all.
func (e *ViolationError) Error() string {
	r := e.Report
	return fmt.Sprintf("%v: %s (in all: violations=%d lost=%d)", ErrViolation, r.Problems[0], r.Violations, r.Lost)
}

// Is reports whether target is ErrViolation.
func (e *ViolationError) Is(target error) bool { return target == ErrViolation }

// InputError reports a write that cannot be in a history: its token is
// below 1 (fencing tokens are etcd revisions, 1 or more). It matches
// ErrInvalidInput.
type InputError struct {
	// Index is the position of the write in the applied history.
	Index int
	// Write is the write.
	Write Write
}

// Error describes the write.
func (e *InputError) Error() string {
	return fmt.Sprintf("%v: write %d (elem %d) carries token %d; tokens are etcd revisions, 1 or more",
		ErrInvalidInput, e.Index, e.Write.Elem, e.Write.Token)
}

// Is reports whether target is ErrInvalidInput.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// Check checks a resource's history: applied, the writes it applied in the
// order it applied them; acked, the elements of the writes acknowledged to
// their writers; final, the elements of its final state as read after the
// run. It returns an *InputError, matching ErrInvalidInput, and no report,
// when a token is below 1.
func Check(applied []Write, acked, final []int64) (*Report, error) {
	r := &Report{Applied: len(applied), Acked: len(acked), Final: len(final)}
	note := func(p Problem) {
		if len(r.Problems) < MaxProblems {
			r.Problems = append(r.Problems, p)
		}
	}
	var highest int64
	seen := map[int64]bool{}
	for i, w := range applied {
		if w.Token < 1 {
			return nil, &InputError{Index: i, Write: w}
		}
		bad := false
		if w.Token < highest {
			r.Backwards++
			bad = true
			note(Problem{Rule: TokenBackwards, Index: i, Elem: w.Elem, Token: w.Token, Prev: highest})
		}
		if i > 0 && w.Token != applied[i-1].Token && seen[w.Token] {
			r.Interleaved++
			bad = true
			note(Problem{Rule: TokenInterleaved, Index: i, Elem: w.Elem, Token: w.Token, Prev: applied[i-1].Token})
		}
		if bad {
			r.Violations++
		}
		seen[w.Token] = true
		highest = max(highest, w.Token)
	}
	r.Tokens = len(seen)
	in := make(map[int64]bool, len(final))
	for _, e := range final {
		in[e] = true
	}
	for _, e := range acked {
		if !in[e] {
			r.Lost++
			note(Problem{Rule: AckedLost, Index: -1, Elem: e})
		}
	}
	return r, nil
}

// History records a resource's history as a test runs: the resource calls
// Apply for every write it applies, writers call Ack for every write
// acknowledged to them. Its methods are safe for concurrent use; the zero
// value is ready to use.
type History struct {
	mu      sync.Mutex
	applied []Write
	acked   []int64
}

// Apply records that the resource applied the write of elem under token.
// Call it where the write takes effect, while the resource is still
// serialized, so that the order of the calls is the order of the writes.
func (h *History) Apply(token, elem int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.applied = append(h.applied, Write{Token: token, Elem: elem})
}

// Ack records that the write of elem was acknowledged to its writer.
func (h *History) Ack(elem int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acked = append(h.acked, elem)
}

// Applied returns a copy of the writes applied so far, in order.
func (h *History) Applied() []Write {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.applied)
}

// Acked returns a copy of the elements acknowledged so far.
func (h *History) Acked() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.acked)
}

// Check checks the history so far against the elements of the applied
// writes as the final state: for a resource that only adds, such as a
// log, every acknowledged write must have been applied. See Check.
func (h *History) Check() (*Report, error) {
	applied := h.Applied()
	final := make([]int64, len(applied))
	for i, w := range applied {
		final[i] = w.Elem
	}
	return Check(applied, h.Acked(), final)
}

// CheckFinal checks the history so far against final, the elements of
// the resource's state read after the run. See Check.
func (h *History) CheckFinal(final []int64) (*Report, error) {
	return Check(h.Applied(), h.Acked(), final)
}

// AckPrefix starts the lines that AckWriter records.
const AckPrefix = "ack "

// AckWriter returns a writer that records an acknowledgement for every
// line "ack <elem>" written to it (see AckLine) and copies every other
// line to other (nil discards them). Give it as the standard output of a
// worker process (faults.StartWorker) whose writers print AckLine for
// each acknowledged write. It is safe for concurrent use.
func (h *History) AckWriter(other io.Writer) io.Writer {
	if other == nil {
		other = io.Discard
	}
	return &ackWriter{h: h, other: other}
}

// AckLine returns the line that tells an AckWriter elem was acknowledged:
// "ack <elem>\n".
func AckLine(elem int64) string { return AckPrefix + strconv.FormatInt(elem, 10) + "\n" }

type ackWriter struct {
	h     *History
	other io.Writer
	mu    sync.Mutex
	buf   []byte
}

func (w *ackWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := w.buf[:i+1]
		w.buf = w.buf[i+1:]
		if s, ok := strings.CutPrefix(strings.TrimSpace(string(line)), AckPrefix); ok {
			if e, err := strconv.ParseInt(s, 10, 64); err == nil {
				w.h.Ack(e)
				continue
			}
		}
		if _, err := w.other.Write(line); err != nil {
			return len(p), err
		}
	}
}
