//go:build unix

package integration

import (
	"fmt"
	"slices"
	"testing"
)

// applied is one write a resource applied: the token it carried and the
// element it added. A resource's applied writes, in the order it applied
// them, are its history.
type applied struct {
	Token int64 `json:"t"`
	Elem  int64 `json:"e"`
}

// verdict is what check found in one resource's history.
type verdict struct {
	// backwards counts applied writes whose token is lower than a token
	// applied before them (rule i).
	backwards int
	// interleaved counts applied writes whose token had written before,
	// with another token in between (rule iii).
	interleaved int
	// violations counts applied writes breaking rule i or iii (once each).
	violations int
	// lost counts acknowledged elements missing from the final read (rule
	// ii, Jepsen's set-full).
	lost int
	// examples describes the first few problems.
	examples []string
}

// check verifies one resource: history is what it applied, in order;
// acked the elements whose writes were acknowledged to their writer; final
// the elements of the final read.
func check(history []applied, acked, final []int64) verdict {
	var v verdict
	note := func(format string, args ...any) {
		if len(v.examples) < 5 {
			v.examples = append(v.examples, fmt.Sprintf(format, args...))
		}
	}
	var highest int64
	seen := map[int64]bool{}
	for i, w := range history {
		bad := false
		if w.Token < highest {
			v.backwards++
			bad = true
			note("write %d (elem %d) carries token %d after token %d", i, w.Elem, w.Token, highest)
		}
		if i > 0 && w.Token != history[i-1].Token && seen[w.Token] {
			v.interleaved++
			bad = true
			note("write %d (elem %d): token %d writes again after token %d", i, w.Elem, w.Token, history[i-1].Token)
		}
		if bad {
			v.violations++
		}
		seen[w.Token] = true
		highest = max(highest, w.Token)
	}
	in := map[int64]bool{}
	for _, e := range final {
		in[e] = true
	}
	for _, e := range acked {
		if !in[e] {
			v.lost++
			note("acknowledged elem %d is not in the final read", e)
		}
	}
	return v
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name                                string
		history                             []applied
		acked, final                        []int64
		backwards, interleaved, viol, lostN int
	}{
		{name: "empty"},
		{
			name:    "monotonic and complete",
			history: []applied{{5, 1}, {5, 2}, {7, 3}, {9, 4}, {9, 5}},
			acked:   []int64{1, 2, 3, 4, 5}, final: []int64{1, 2, 3, 4, 5},
		},
		{
			name:    "unacknowledged missing element is not lost",
			history: []applied{{5, 1}, {7, 3}},
			acked:   []int64{3}, final: []int64{3},
		},
		{
			name:    "stale write after a newer one",
			history: []applied{{5, 1}, {7, 2}, {5, 3}},
			acked:   []int64{1, 2, 3}, final: []int64{1, 3},
			backwards: 1, interleaved: 1, viol: 1, lostN: 1,
		},
		{
			name:    "older token first seen late goes backwards without interleaving",
			history: []applied{{7, 1}, {5, 2}},
			acked:   []int64{1, 2}, final: []int64{1, 2},
			backwards: 1, viol: 1,
		},
		{
			name:      "interleaving counted once per write",
			history:   []applied{{5, 1}, {7, 2}, {5, 3}, {7, 4}},
			final:     []int64{1, 2, 3, 4},
			backwards: 1, interleaved: 2, viol: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := check(tc.history, tc.acked, tc.final)
			got := []int{v.backwards, v.interleaved, v.violations, v.lost}
			want := []int{tc.backwards, tc.interleaved, tc.viol, tc.lostN}
			if !slices.Equal(got, want) {
				t.Errorf("backwards, interleaved, violations, lost = %v, want %v (%v)", got, want, v.examples)
			}
		})
	}
}
