//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/faults"
)

// successorStats is the verdict of the successor check over one shard or
// line: loss must be signalled before a successor is admitted.
type successorStats struct {
	checked int // hand-overs checked
	excused int // hand-overs a fault explains (see takenAway)
	early   int // successors admitted before their predecessor knew
	// etcdEarly counts early hand-overs that etcd's lease defect explains
	// (see etcdRevokedEarly): reported, not failed.
	etcdEarly int
	// examples of early hand-overs, and of those etcd explains
	examples, etcdExamples []string
}

func (s *successorStats) add(o successorStats) {
	s.checked += o.checked
	s.excused += o.excused
	s.early += o.early
	s.etcdEarly += o.etcdEarly
	s.examples = appendExamples(s.examples, o.examples...)
	s.etcdExamples = appendExamples(s.etcdExamples, o.etcdExamples...)
}

// appendExamples appends es to to, keeping at most five.
func appendExamples(to []string, es ...string) []string {
	for _, e := range es {
		if len(to) < 5 {
			to = append(to, e)
		}
	}
	return to
}

// takenAway names the faults that take a lease away behind its holder's
// back: a successor may then be admitted before the holder hears of it,
// as the lease package documents.
var takenAway = map[string]bool{
	faults.KindRevoke: true, faults.KindDeleteKey: true, faults.KindCompactedWatch: true,
}

// checkSuccessors checks every hand-over of one shard's lock, in token
// order: the holder of one token must have learned that its hold was over
// (it began to release, or its lease's Done closed) before the holder of
// the next token's Acquire returned. A hand-over is excused when a fault
// took the first holder's record away behind its back (revoke, delete-key,
// compacted-watch: the faults that name the records they took, whenever
// the holder's Acquire returned, even after the fault), or when, between
// the two acquisitions, such a fault that names nothing ran or the first
// holder's worker process was frozen (it cannot signal anything while
// stopped).
func checkSuccessors(holds map[int64]*holdRec, windows []window) successorStats {
	var st successorStats
	toks := make([]int64, 0, len(holds))
	for tok, h := range holds {
		if h.acq != 0 && h.worker >= 0 {
			toks = append(toks, tok)
		}
	}
	slices.Sort(toks)
	for i := 1; i < len(toks); i++ {
		prev, next := holds[toks[i-1]], holds[toks[i]]
		st.checked++
		if prev.end != 0 && prev.end <= next.acq+int64(observeSlack) {
			continue
		}
		if excused(toks[i-1], prev, next, windows) {
			st.excused++
			continue
		}
		example := earlyExample(toks[i-1], toks[i], prev, next, windows)
		if etcdRevokedEarly(prev, next, windows) {
			st.etcdEarly++
			st.etcdExamples = appendExamples(st.etcdExamples, example)
			continue
		}
		st.early++
		st.examples = appendExamples(st.examples, example)
	}
	return st
}

// earlyExample describes the early hand-over from prev (token ptok) to
// next (token ntok).
func earlyExample(ptok, ntok int64, prev, next *holdRec, windows []window) string {
	late := "never"
	if prev.end != 0 {
		late = time.Duration(prev.end - next.acq).String()
	}
	return fmt.Sprintf("token %d (worker %d) admitted while token %d (worker %d, held %v) held on: it learned %s later (%s); faults meanwhile: %v; %s",
		ntok, next.worker, ptok, prev.worker, time.Duration(next.acq-prev.acq), late, prev.cause, during(min(prev.acq, next.acq), next.acq, windows), prev.timing())
}

// etcdStopped names the faults that freeze an etcd member's process (it
// may be the leader): when it continues, an etcd defect lets a leader
// frozen past a lease's TTL revoke that lease although the new leader
// renewed it meanwhile (etcd#15247, fixed by etcd#16822 and reopened by
// etcd#18428's shortcut; seen on 3.5.36 and 3.7.3: the member's log says
// "failed to apply request … lease not found" about 20 ms after it
// continued). Nothing a client does can prevent it.
var etcdStopped = map[string]bool{faults.KindMemberSigstop: true, faults.KindLeaderSigstop: true}

// etcdRevokedEarly reports whether etcd's lease defect explains an early
// hand-over from prev to next: both signs must be there. The predecessor's
// own Client reported its session revoked before the TTL its last renewal
// granted had run out (lease.ErrRevokedEarly, which nothing in these runs
// but a revoke fault, excused above, or etcd itself can cause), and a
// frozen etcd member continued between the two acquisitions.
func etcdRevokedEarly(prev, next *holdRec, windows []window) bool {
	if prev.cause != causeRevokedEarly {
		return false
	}
	from := min(prev.acq, next.acq)
	for _, w := range windows {
		if etcdStopped[w.kind] && w.to >= from && w.to <= next.acq {
			return true
		}
	}
	return false
}

// timing describes when h's Acquire was called and when its validity
// deadline was, relative to when it returned.
func (h *holdRec) timing() string {
	if h.until == 0 {
		return "no timing reported"
	}
	return fmt.Sprintf("its Acquire waited %v and returned at %s, %v before its validity deadline",
		time.Duration(h.acq-h.asked), time.Unix(0, h.acq).UTC().Format("15:04:05.000000"), time.Duration(h.until-h.acq))
}

// during names the faults among windows that overlap [from, to], each
// with its start and end (its heal) relative to to.
func during(from, to int64, windows []window) []string {
	var ws []string
	for _, w := range windows {
		if w.to >= from && w.from <= to {
			ws = append(ws, fmt.Sprintf("%s@%v..%v", w.kind, time.Duration(w.from-to).Round(time.Millisecond), time.Duration(w.to-to).Round(time.Millisecond)))
		}
	}
	return ws
}

// observeSlack is how much later than the next holder's admission the
// previous holder may record its signal: both times are taken by
// goroutines, which a loaded machine schedules late. A Client that misses
// its validity deadline closes its leases' Done channels and only then
// revokes its session, which admits the next holder at once; a worker
// process with a hundred leases on that session wakes a hundred
// goroutines, and the last may note the time after the revoke took effect
// (seen: 12 ms).
const observeSlack = 50 * time.Millisecond

// excused reports whether a fault among windows explains an early
// hand-over from prev (whose token is tok) to next. A fault that names
// the records it took explains it when prev's is among them: its holder's
// Acquire may have returned after the record was gone. Other faults count
// by time. A worker process frozen just after its Acquire returned records
// its acquisition when it wakes, possibly after its successor's: the
// window starts at the earlier of the two.
func excused(tok int64, prev, next *holdRec, windows []window) bool {
	from := min(prev.acq, next.acq)
	for _, w := range windows {
		if w.taken != nil {
			if slices.Contains(w.taken, tok) {
				return true
			}
			continue
		}
		if w.to < from || w.from > next.acq {
			continue
		}
		if takenAway[w.kind] || (w.kind == faults.KindPause && w.worker == prev.worker) {
			return true
		}
	}
	return false
}

// The successor check finds a hand-over to a holder admitted before its
// predecessor learned, unless a fault in between explains it.
func TestCheckSuccessors(t *testing.T) {
	const ms = int64(time.Millisecond)
	holds := map[int64]*holdRec{
		10: {worker: 0, acq: 100 * ms, end: 200 * ms, cause: "release"},
		20: {worker: 1, acq: 250 * ms, end: 400 * ms, cause: "deadline"}, // told before 30 came in
		30: {worker: 2, acq: 300 * ms, end: 350 * ms, cause: "release"},  // admitted at 300, 20 told at 400
		40: {worker: 3, acq: 500 * ms},                                   // 30 told at 350: fine
	}
	st := checkSuccessors(holds, nil)
	if st.checked != 3 || st.early != 1 || st.excused != 0 || len(st.examples) != 1 {
		t.Errorf("no faults: %+v, want 3 checked, 1 early", st)
	}
	st = checkSuccessors(holds, []window{{kind: faults.KindRevoke, worker: -1, from: 260 * ms, to: 270 * ms}})
	if st.early != 0 || st.excused != 1 {
		t.Errorf("a revoke in between: %+v, want it excused", st)
	}
	st = checkSuccessors(holds, []window{{kind: faults.KindPause, worker: 2, from: 260 * ms, to: 270 * ms}})
	if st.early != 1 {
		t.Errorf("another worker paused: %+v, want the early hand-over", st)
	}
	st = checkSuccessors(holds, []window{{kind: faults.KindPause, worker: 1, from: 100 * ms, to: 260 * ms}})
	if st.early != 0 || st.excused != 1 {
		t.Errorf("the predecessor's worker paused: %+v, want it excused", st)
	}
	// A worker frozen just after its Acquire returned records it late,
	// after its successor: still excused by its pause.
	frozen := map[int64]*holdRec{
		50: {worker: 2, acq: 2000 * ms, end: 2001 * ms, cause: "session-expired"},
		60: {worker: 0, acq: 1000 * ms},
	}
	st = checkSuccessors(frozen, []window{{kind: faults.KindPause, worker: 2, from: 100 * ms, to: 1990 * ms}})
	if st.early != 0 || st.excused != 1 {
		t.Errorf("the predecessor frozen before it noted its acquisition: %+v, want it excused", st)
	}
	// A fault that names the records it took explains the hand-over of
	// those records only, whenever their holders' calls returned: here
	// the revoke ran while token 20's Acquire was still under way.
	named := []window{{kind: faults.KindRevoke, worker: -1, from: 200 * ms, to: 210 * ms, taken: []int64{20}}}
	if st = checkSuccessors(holds, named); st.early != 0 || st.excused != 1 {
		t.Errorf("a revoke that took token 20 before its Acquire returned: %+v, want it excused", st)
	}
	other := []window{{kind: faults.KindRevoke, worker: -1, from: 260 * ms, to: 270 * ms, taken: []int64{30}}}
	if st = checkSuccessors(holds, other); st.early != 1 || st.excused != 0 {
		t.Errorf("a revoke in between that took another record: %+v, want the early hand-over", st)
	}
	// Within the observer's slack: not early.
	slack := map[int64]*holdRec{
		70: {worker: 3, acq: 100 * ms, end: 300*ms + int64(observeSlack)/2, cause: "deadline"},
		80: {worker: 1, acq: 300 * ms},
	}
	if st = checkSuccessors(slack, nil); st.early != 0 {
		t.Errorf("within the slack: %+v, want no early hand-over", st)
	}
	// etcd's lease defect: a frozen member continued, and the
	// predecessor's Client saw its session revoked before its TTL ran out.
	// Both signs are needed.
	revoked := map[int64]*holdRec{
		90:  {worker: 0, acq: 100 * ms, end: 600 * ms, cause: causeRevokedEarly},
		100: {worker: 1, acq: 400 * ms},
	}
	resumed := []window{{kind: faults.KindLeaderSigstop, worker: -1, from: 50 * ms, to: 380 * ms}}
	if st = checkSuccessors(revoked, resumed); st.early != 0 || st.etcdEarly != 1 || len(st.etcdExamples) != 1 {
		t.Errorf("etcd revoked the session after its frozen leader continued: %+v, want it counted as etcd's", st)
	}
	if st = checkSuccessors(revoked, nil); st.early != 1 || st.etcdEarly != 0 {
		t.Errorf("revoked early with no etcd member frozen: %+v, want the early hand-over", st)
	}
	later := []window{{kind: faults.KindLeaderSigstop, worker: -1, from: 50 * ms, to: 450 * ms}}
	if st = checkSuccessors(revoked, later); st.early != 1 || st.etcdEarly != 0 {
		t.Errorf("the member continued after the successor was admitted: %+v, want the early hand-over", st)
	}
	revoked[90].cause = "session-expired"
	if st = checkSuccessors(revoked, resumed); st.early != 1 || st.etcdEarly != 0 {
		t.Errorf("a member continued but the session was not revoked early: %+v, want the early hand-over", st)
	}
}

// stubFault is a fault whose Inject returns err and does nothing else;
// it says it took the record created at revision 10.
type stubFault struct {
	kind   string
	err    error
	healed int
}

func (f *stubFault) Kind() string                 { return f.kind }
func (f *stubFault) Inject(context.Context) error { return f.err }
func (f *stubFault) Heal(context.Context) error   { f.healed++; return nil }
func (f *stubFault) Taken() []int64               { return []int64{10} }

// A fault that took a lease away and then failed (CompactedWatch deleted
// the holder's record, then its compaction failed) is counted and kept as
// a window, and so is one whose delete or revoke may have applied, so
// that the successor check allows for what they did; a fault that did
// nothing is neither. Before faults.ErrPartial, such a CompactedWatch was
// dropped as "not counted" and the hand-over it caused was reported as
// early (issue 47).
func TestNemesisKeepsFaultsThatTookEffect(t *testing.T) {
	const ms = int64(time.Millisecond)
	for _, c := range []struct {
		err           error
		counted, kept bool
	}{
		{nil, true, true},
		{fmt.Errorf("%w: compact: EOF", faults.ErrPartial), true, true},
		{fmt.Errorf("%w: delete holder's record: timed out", faults.ErrOutcomeUnknown), false, true},
		{faults.ErrNoTarget, false, false},
		{errors.New("find holder: timed out"), false, false},
	} {
		n := &nemesis{t: t, counts: []map[string]int{{}}}
		f := &stubFault{kind: faults.KindCompactedWatch, err: c.err}
		before := time.Now().UnixNano()
		if got := n.apply(context.Background(), f, 0, []int{0}); got != c.counted {
			t.Errorf("%v: apply = %v, want %v", c.err, got, c.counted)
		}
		if got := n.counts[0][faults.KindCompactedWatch] == 1; got != c.counted {
			t.Errorf("%v: counted %v, want %v", c.err, got, c.counted)
		}
		if got := len(n.windows) == 1; got != c.kept {
			t.Errorf("%v: window kept %v, want %v", c.err, got, c.kept)
			continue
		}
		if !c.kept {
			continue
		}
		// The hand-over the fault caused is excused, not early.
		w := n.windows[0]
		holds := map[int64]*holdRec{
			10: {worker: 0, acq: before - 100*ms, end: w.to + 200*ms, cause: "key-deleted"},
			20: {worker: 1, acq: w.to},
		}
		if st := checkSuccessors(holds, n.windows); st.early != 0 || st.excused != 1 {
			t.Errorf("%v: successor check %+v, want the hand-over excused", c.err, st)
		}
	}
}
