package check_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/check"
)

// op builds an Op of client c over [call, ret].
func op(c int, k check.OpKind, tok, val int64, out check.Outcome, call, ret int64) check.Op {
	return check.Op{Client: c, Kind: k, Token: tok, Value: val, Outcome: out, Call: call, Return: ret}
}

func TestCheckLinearizable(t *testing.T) {
	const (
		R, W, P, C = check.OpRead, check.OpWrite, check.OpPlainRead, check.OpClaim
		ok, stale  = check.OK, check.Stale
		unv, unk   = check.Unverified, check.Unknown
	)
	// A (token 5) reads and writes 1; B (token 7) reads 1 and writes 2.
	base := []check.Op{
		op(0, R, 5, 0, ok, 0, 1), op(0, W, 5, 1, ok, 2, 3),
		op(1, R, 7, 1, ok, 4, 5), op(1, W, 7, 2, ok, 6, 7),
	}
	for _, tc := range []struct {
		name string
		more []check.Op
		want check.Verdict
	}{
		{name: "sequential", want: check.Linearizable},
		{name: "late stale write refused", more: []check.Op{op(0, W, 5, 3, stale, 8, 9)}, want: check.Linearizable},
		{name: "late stale write accepted", more: []check.Op{op(0, W, 5, 3, ok, 8, 9)}, want: check.NotLinearizable},
		{name: "stale write in doubt", more: []check.Op{op(0, W, 5, 3, unk, 8, 0), op(1, R, 7, 2, ok, 10, 11)}, want: check.Linearizable},
		{name: "newer write in doubt, then seen", more: []check.Op{op(2, W, 9, 3, unk, 8, 0), op(1, R, 7, 3, stale, 10, 11)}, want: check.Linearizable},
		{name: "refused as stale with no newer token", more: []check.Op{op(1, W, 7, 3, stale, 8, 9)}, want: check.NotLinearizable},
		{name: "newer token unverified", more: []check.Op{op(2, R, 9, 0, unv, 8, 9), op(1, W, 7, 3, ok, 10, 11)}, want: check.Linearizable},
		{name: "unverified at the mark", more: []check.Op{op(1, R, 7, 0, unv, 8, 9), op(1, W, 7, 3, ok, 10, 11)}, want: check.Linearizable},
		{name: "unverified changes nothing", more: []check.Op{op(0, W, 5, 3, unv, 8, 9), op(1, R, 7, 2, ok, 10, 11)}, want: check.Linearizable},
		{name: "read of an overwritten value", more: []check.Op{op(1, R, 7, 1, ok, 8, 9)}, want: check.NotLinearizable},
		{name: "concurrent write may be read", more: []check.Op{op(2, W, 9, 3, ok, 8, 12), op(1, R, 7, 3, stale, 9, 10)}, want: check.Linearizable},
		{name: "plain read ignores the mark", more: []check.Op{op(0, P, 5, 2, ok, 8, 9)}, want: check.Linearizable},
		{name: "claim raises the mark", more: []check.Op{op(2, C, 9, 0, ok, 8, 9), op(1, W, 7, 3, ok, 10, 11)}, want: check.NotLinearizable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := check.CheckLinearizable(append(append([]check.Op(nil), base...), tc.more...), 10*time.Second)
			if l.Verdict != tc.want {
				t.Errorf("verdict %s, want %s", l.Verdict, tc.want)
			}
		})
	}
}

// The two checkers are independent, and both reject the same hand-made
// violation: a holder superseded by a newer token whose late write was
// accepted all the same.
func TestCheckersAgree(t *testing.T) {
	ops := []check.Op{
		op(0, check.OpRead, 5, 0, check.OK, 0, 1),
		op(1, check.OpRead, 7, 0, check.OK, 2, 3),
		op(1, check.OpWrite, 7, 2, check.OK, 4, 5),
		op(0, check.OpWrite, 5, 1, check.OK, 6, 7), // stale, accepted
	}
	var applied []check.Write
	var acked []int64
	for _, o := range ops {
		if o.Kind == check.OpWrite && o.Outcome == check.OK {
			applied = append(applied, check.Write{Token: o.Token, Elem: o.Value})
			acked = append(acked, o.Value)
		}
	}
	r, err := check.Check(applied, acked, []int64{1}) // A's write replaced B's set
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() {
		t.Errorf("Check found nothing: %v", r)
	}
	l := check.CheckLinearizable(ops, 10*time.Second)
	if l.Verdict != check.NotLinearizable {
		t.Errorf("CheckLinearizable: %s, want %s", l.Verdict, check.NotLinearizable)
	}
	var b strings.Builder
	if err := l.Visualize(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "write(t5, 1)") {
		t.Errorf("visualisation does not name the stale write (%d bytes)", b.Len())
	}

	// Refused instead, the same write leaves a history both accept.
	ops[3].Outcome = check.Stale
	if r, _ := check.Check(applied[:1], acked[:1], []int64{2}); !r.OK() {
		t.Errorf("Check: %v", r)
	}
	if l := check.CheckLinearizable(ops, 10*time.Second); l.Verdict != check.Linearizable {
		t.Errorf("CheckLinearizable: %s, want %s", l.Verdict, check.Linearizable)
	}
}
