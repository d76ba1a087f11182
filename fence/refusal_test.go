package fence_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

func TestOutcomeWords(t *testing.T) {
	want := []string{"accepted", "stale", "wrong_lock", "mark_ahead", "unverified", "missing", "malformed", "failed"}
	got := fence.Outcomes()
	if len(got) != len(want) {
		t.Fatalf("Outcomes: got %d, want %d", len(got), len(want))
	}
	for i, o := range got {
		if o.String() != want[i] {
			t.Errorf("Outcomes()[%d].String(): got %q, want %q", i, o, want[i])
		}
	}
	if s := fence.Outcome(0).String(); s != "outcome(0)" {
		t.Errorf("zero Outcome: got %q, want outcome(0)", s)
	}
	if s := fence.Outcome(200).String(); s != "outcome(200)" {
		t.Errorf("Outcome(200): got %q, want outcome(200)", s)
	}
}

// TestRefusedErrorIs checks that each refusal matches the sentinel of its
// outcome and no other's.
func TestRefusedErrorIs(t *testing.T) {
	sentinels := []error{fence.ErrStale, fence.ErrWrongLock, fence.ErrMarkAhead, fence.ErrUnverified,
		fence.ErrMissing, fence.ErrInvalid, fence.ErrNoMark, fence.ErrMarkChanged, fence.ErrSyntax, fence.ErrInvalidName}
	want := map[fence.Outcome][]error{
		fence.Stale:      {fence.ErrStale},
		fence.WrongLock:  {fence.ErrWrongLock},
		fence.MarkAhead:  {fence.ErrMarkAhead, fence.ErrStale},
		fence.Unverified: {fence.ErrUnverified},
		fence.Missing:    {fence.ErrMissing},
		fence.Malformed:  {fence.ErrInvalid},
		fence.Accepted:   nil,
		fence.Failed:     nil,
	}
	for o, ws := range want {
		err := error(&fence.RefusedError{Outcome: o, Resource: "r", Token: fence.Token{"l", 3}})
		for _, s := range sentinels {
			is := false
			for _, w := range ws {
				is = is || w == s
			}
			if got := errors.Is(err, s); got != is {
				t.Errorf("%s refusal matches %v: got %t, want %t", o, s, got, is)
			}
		}
		if got := fence.OutcomeOf(fmt.Errorf("wrapped: %w", err)); got != o {
			t.Errorf("OutcomeOf(%s refusal): got %s", o, got)
		}
	}
	detail := errors.New("detail")
	err := &fence.RefusedError{Outcome: fence.Unverified, Token: fence.Token{"l", 3}, Err: detail}
	if !errors.Is(err, detail) || !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("%v: want a match for its Err and ErrUnverified", err)
	}
	if got := fence.OutcomeOf(nil); got != fence.Accepted {
		t.Errorf("OutcomeOf(nil): got %s, want accepted", got)
	}
	if got := fence.OutcomeOf(detail); got != fence.Failed {
		t.Errorf("OutcomeOf(other error): got %s, want failed", got)
	}
}

func TestRefusedErrorText(t *testing.T) {
	tok := fence.Token{Lock: "orders", Revision: 3}
	mark := fence.Token{Lock: "orders", Revision: 9}
	for _, tc := range []struct {
		err  *fence.RefusedError
		want string
	}{
		{&fence.RefusedError{Outcome: fence.Stale, Token: tok, Mark: mark},
			`fence: stale token: lock "orders" revision 3 is older than accepted revision 9`},
		{&fence.RefusedError{Outcome: fence.Stale, Resource: "t", Row: "id=1", Token: tok, Mark: mark},
			`fence: resource "t" row id=1 refused stale token: lock "orders" revision 3 is older than accepted revision 9`},
		{&fence.RefusedError{Outcome: fence.WrongLock, Resource: "r", Lock: "jobs", Token: tok},
			`fence: resource "r" refused token for lock "orders": the resource is bound to lock "jobs"`},
		{&fence.RefusedError{Outcome: fence.Missing, Resource: "r", Err: errors.New("send it")},
			`fence: resource "r" refused missing fencing token: send it`},
		{&fence.RefusedError{Outcome: fence.Failed, Token: tok}, `fence: token 3:orders: failed`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}
