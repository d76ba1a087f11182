package check_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/integration/check"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheck(t *testing.T) {
	w := func(tok, elem int64) check.Write { return check.Write{Token: tok, Elem: elem} }
	for _, tc := range []struct {
		name                                string
		history                             []check.Write
		acked, final                        []int64
		backwards, interleaved, viol, lostN int
		first                               check.Rule
	}{
		{name: "empty"},
		{
			name:    "monotonic and complete",
			history: []check.Write{w(5, 1), w(5, 2), w(7, 3), w(9, 4), w(9, 5)},
			acked:   []int64{1, 2, 3, 4, 5}, final: []int64{1, 2, 3, 4, 5},
		},
		{
			name:    "unacknowledged missing element is not lost",
			history: []check.Write{w(5, 1), w(7, 3)},
			acked:   []int64{3}, final: []int64{3},
		},
		{
			name:    "stale write after a newer one",
			history: []check.Write{w(5, 1), w(7, 2), w(5, 3)},
			acked:   []int64{1, 2, 3}, final: []int64{1, 3},
			backwards: 1, interleaved: 1, viol: 1, lostN: 1, first: check.TokenBackwards,
		},
		{
			name:    "older token first seen late goes backwards without interleaving",
			history: []check.Write{w(7, 1), w(5, 2)},
			acked:   []int64{1, 2}, final: []int64{1, 2},
			backwards: 1, viol: 1, first: check.TokenBackwards,
		},
		{
			name:      "interleaving counted once per write",
			history:   []check.Write{w(5, 1), w(7, 2), w(5, 3), w(7, 4)},
			final:     []int64{1, 2, 3, 4},
			backwards: 1, interleaved: 2, viol: 2, first: check.TokenBackwards,
		},
		{
			name:    "only lost",
			history: []check.Write{w(5, 1)},
			acked:   []int64{1, 2}, final: []int64{1},
			lostN: 1, first: check.AckedLost,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := check.Check(tc.history, tc.acked, tc.final)
			if err != nil {
				t.Fatal(err)
			}
			got := []int{r.Backwards, r.Interleaved, r.Violations, r.Lost}
			want := []int{tc.backwards, tc.interleaved, tc.viol, tc.lostN}
			if !slices.Equal(got, want) {
				t.Errorf("backwards, interleaved, violations, lost = %v, want %v (%v)", got, want, r.Problems)
			}
			if got, want := r.OK(), tc.viol+tc.lostN == 0; got != want {
				t.Errorf("OK = %v, want %v", got, want)
			}
			err = r.Err()
			if tc.first == 0 {
				if err != nil {
					t.Errorf("Err = %v, want nil", err)
				}
				return
			}
			var ve *check.ViolationError
			if !errors.As(err, &ve) || !errors.Is(err, check.ErrViolation) {
				t.Fatalf("Err = %v, want a *ViolationError matching ErrViolation", err)
			}
			if got := ve.Report.Problems[0].Rule; got != tc.first {
				t.Errorf("first problem %v, want %v", got, tc.first)
			}
		})
	}
}

func TestCheckInvalidInput(t *testing.T) {
	for _, tok := range []int64{0, -1} {
		r, err := check.Check([]check.Write{{Token: 3, Elem: 1}, {Token: tok, Elem: 2}}, nil, nil)
		var ie *check.InputError
		if !errors.Is(err, check.ErrInvalidInput) || !errors.As(err, &ie) || r != nil {
			t.Fatalf("token %d: Check = %v, %v; want nil and an *InputError", tok, r, err)
		}
		if ie.Index != 1 || ie.Write.Token != tok {
			t.Errorf("token %d: error names write %d %+v, want write 1", tok, ie.Index, ie.Write)
		}
	}
}

func TestProblemsAreCapped(t *testing.T) {
	var h []check.Write
	for i := range 50 {
		h = append(h, check.Write{Token: int64(100 - i), Elem: int64(i)})
	}
	r, err := check.Check(h, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Backwards != 49 || len(r.Problems) != check.MaxProblems {
		t.Errorf("backwards=%d problems=%d, want 49 and %d", r.Backwards, len(r.Problems), check.MaxProblems)
	}
	if want := "violations=49 lost=0"; !strings.Contains(r.Err().Error(), want) {
		t.Errorf("Err() = %q, want it to count the rest (%q)", r.Err(), want)
	}
}

func TestHistoryConcurrent(t *testing.T) {
	var h check.History
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				e := int64(g*1000 + i)
				h.Apply(int64(g+1), e)
				h.Ack(e)
			}
		})
	}
	wg.Wait()
	r, err := h.Check()
	if err != nil {
		t.Fatal(err)
	}
	if r.Applied != 800 || r.Acked != 800 || r.Lost != 0 {
		t.Errorf("report %v, want 800 applied and acked, none lost", r)
	}
	r, err = h.CheckFinal(nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lost != 800 {
		t.Errorf("against an empty final state: lost=%d, want 800", r.Lost)
	}
}

func TestAckWriter(t *testing.T) {
	var h check.History
	var other strings.Builder
	w := h.AckWriter(&other)
	for _, chunk := range []string{"ack 1\nhello\nac", "k 2\n", "ack x\n", check.AckLine(-3), "tail"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := h.Acked(), []int64{1, 2, -3}; !slices.Equal(got, want) {
		t.Errorf("acked %v, want %v", got, want)
	}
	if got, want := other.String(), "hello\nack x\n"; got != want {
		t.Errorf("other lines %q, want %q", got, want)
	}
}
