package check

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

// OpKind is what an Op did to a fenced register.
type OpKind int

// The kinds of operation.
const (
	// OpRead is a fenced read: the resource admits it as it admits a
	// write (raising its mark to the token), then returns the value.
	OpRead OpKind = iota + 1
	// OpWrite replaces the value, if admitted.
	OpWrite
	// OpPlainRead returns the value without looking at the token (an
	// unfenced SELECT, say).
	OpPlainRead
	// OpClaim raises the mark to the token, if admitted, and returns
	// nothing (guard.Claim, sqlguard's Claim).
	OpClaim
)

// String returns "read", "write", "plain-read" or "claim".
func (k OpKind) String() string {
	switch k {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpPlainRead:
		return "plain-read"
	case OpClaim:
		return "claim"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is what the client of an Op learned.
type Outcome int

// The outcomes.
const (
	// OK: the resource admitted the operation and answered.
	OK Outcome = iota + 1
	// Stale: the resource refused the token as older than its mark.
	Stale
	// Unverified: the resource refused a token that it could not verify
	// as the lock's current holder's. guard asks only about tokens newer
	// than the mark, sqlguard about any token it has not verified yet: it
	// is legal whatever the mark.
	Unverified
	// Unknown: no answer (a time-out, a lost reply, a write delivered
	// late): the operation may or may not have taken effect, at any time
	// after its call.
	Unknown
)

// String returns "ok", "stale", "unverified" or "unknown".
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Stale:
		return "stale"
	case Unverified:
		return "unverified"
	case Unknown:
		return "unknown"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Op is one operation on a fenced register as its client saw it, for
// CheckLinearizable: when it was called and when its answer came, on one
// clock shared by all clients (time.Time.UnixNano on one machine).
type Op struct {
	// Client identifies the client (a worker); for the visualisation.
	Client int
	// Kind is what the operation did.
	Kind OpKind
	// Token is the fencing token it carried (fence.Token.Revision).
	Token int64
	// Value names the register's value: for an OpWrite, the value written;
	// for an OpRead or OpPlainRead that answered OK, the value read. 0 is the
	// initial value. Give every write a value of its own (for a register
	// holding a growing set, the element the write adds).
	Value int64
	// Outcome is what the client learned.
	Outcome Outcome
	// Call and Return are when the client sent the operation and when
	// it got the answer, in nanoseconds. Return is not used for Unknown.
	Call, Return int64
}

// String describes the operation, as the visualisation shows it.
func (o Op) String() string {
	s := fmt.Sprintf("%s(t%d", o.Kind, o.Token)
	if o.Kind == OpWrite {
		s += fmt.Sprintf(", %d", o.Value)
	}
	s += ") -> " + o.Outcome.String()
	if o.Outcome == OK && (o.Kind == OpRead || o.Kind == OpPlainRead) {
		s += fmt.Sprintf(" %d", o.Value)
	}
	return s
}

// Verdict is the answer of CheckLinearizable.
type Verdict string

// The verdicts.
const (
	// Linearizable: some order of the operations, each placed between its
	// call and its return, is a legal run of the fenced register.
	Linearizable Verdict = "linearizable"
	// NotLinearizable: no such order exists.
	NotLinearizable Verdict = "not-linearizable"
	// TimedOut: the search did not finish in time.
	TimedOut Verdict = "unknown"
)

// regState is the fenced register's state: its mark (the highest token
// admitted) and the name of its value.
type regState struct{ mark, value int64 }

// FencedRegister is the sequential specification CheckLinearizable checks
// histories against, as a porcupine model over Op inputs: a register
// that admits an operation iff its token is at least its mark, raising the
// mark to the token. An admitted OpWrite sets the value; an admitted OpRead
// returns it; an OpPlainRead returns it whatever its token, and changes
// nothing; an OpClaim only raises the mark. Refusals change nothing: Stale is
// legal iff the token is below the mark, Unverified always. An
// Unknown operation takes effect if its token is admitted (with no
// return, the checker may also place it after everything else, where it
// changes nothing anyone saw).
var FencedRegister = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, _ any) (bool, any) {
		s, o := state.(regState), input.(Op)
		if o.Kind == OpPlainRead {
			return o.Outcome != OK || o.Value == s.value, s
		}
		admitted := o.Token >= s.mark
		next := s
		if admitted {
			next.mark = o.Token
			if o.Kind == OpWrite {
				next.value = o.Value
			}
		}
		switch o.Outcome {
		case OK:
			if o.Kind == OpRead && o.Value != s.value {
				return false, s
			}
			return admitted, next
		case Stale:
			return o.Token < s.mark, s
		case Unverified:
			return true, s
		default:
			return true, next
		}
	},
	DescribeOperation: func(input, _ any) string { return input.(Op).String() },
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("mark=%d value=%d", s.mark, s.value)
	},
}

// Linearization is the result of CheckLinearizable.
type Linearization struct {
	// Verdict is the answer.
	Verdict Verdict
	// Ops counts the operations checked.
	Ops int
	// Took is how long the search took.
	Took time.Duration

	history []porcupine.Operation
	timeout time.Duration
}

// CheckLinearizable checks, with porcupine, whether ops — the history of
// one fenced register — is linearizable against FencedRegister. It is a
// check independent of Check's rules: Check looks at the order in which
// the resource applied writes, CheckLinearizable at what the clients saw,
// and when. timeout bounds the search (0: none); when it passes the
// verdict is TimedOut.
func CheckLinearizable(ops []Op, timeout time.Duration) *Linearization {
	h := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		ret := o.Return
		if o.Outcome == Unknown {
			ret = math.MaxInt64
		}
		h[i] = porcupine.Operation{ClientId: o.Client, Input: o, Call: o.Call, Output: o.Outcome, Return: ret}
	}
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(FencedRegister, h, timeout)
	l := &Linearization{Ops: len(ops), Took: time.Since(start), history: h, timeout: timeout}
	switch res {
	case porcupine.Ok:
		l.Verdict = Linearizable
	case porcupine.Illegal:
		l.Verdict = NotLinearizable
	default:
		l.Verdict = TimedOut
	}
	return l
}

// Visualize checks the history again, recording what the search found,
// and writes porcupine's HTML visualisation of it to w: for a history that
// is not linearizable, the longest legal prefixes and where they end.
func (l *Linearization) Visualize(w io.Writer) error {
	_, info := porcupine.CheckOperationsVerbose(FencedRegister, l.history, l.timeout)
	return porcupine.Visualize(FencedRegister, info, w)
}
