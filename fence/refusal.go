package fence

import (
	"errors"
	"fmt"
	"strings"
)

// Outcome is what a resource decided about one fencing token. Its String
// is the one word that every package of this module uses for it: the
// "outcome" label of the decision metrics, the "outcome" field of log
// records and the "fencekit.outcome" span attribute of guard, grpcguard,
// sqlguard, pgxguard, redisguard and objguard. The zero Outcome is no
// decision.
type Outcome uint8

// The outcomes of a fencing decision. Every one but Accepted and Failed
// is a refusal, reported as a *RefusedError.
const (
	// Accepted: the token was equal to or newer than the mark; the write
	// was admitted.
	Accepted Outcome = iota + 1
	// Stale: the token was older than the mark (ErrStale). Its holder
	// was superseded and must stop.
	Stale
	// WrongLock: the token was for another lock than the one the resource
	// is bound to (ErrWrongLock).
	WrongLock
	// MarkAhead: the token was older than the mark, and is its lock's
	// current holder's (ErrMarkAhead): the mark must be reset.
	MarkAhead
	// Unverified: the lock service did not confirm the token as its
	// lock's current holder's (ErrUnverified); the mark did not move.
	Unverified
	// Missing: a write to a fenced resource carried no token
	// (ErrMissing).
	Missing
	// Malformed: the token did not parse, was sent more than once, or no
	// acquisition can have made it (ErrInvalid).
	Malformed
	// Failed: no decision was made: the mark's store, the database or
	// the lock service failed or did not answer in time, or the caller's
	// context ended. Failures are not *RefusedError; they match the
	// package's own errors (guard.ErrUnavailable, ctx.Err(), a driver's).
	Failed
)

// outcomeWords are the Outcomes' names, by value.
var outcomeWords = [...]string{
	Accepted:   "accepted",
	Stale:      "stale",
	WrongLock:  "wrong_lock",
	MarkAhead:  "mark_ahead",
	Unverified: "unverified",
	Missing:    "missing",
	Malformed:  "malformed",
	Failed:     "failed",
}

// Outcomes lists every Outcome, in the order of their values, so that
// metrics can create each series at zero.
func Outcomes() []Outcome {
	return []Outcome{Accepted, Stale, WrongLock, MarkAhead, Unverified, Missing, Malformed, Failed}
}

// String returns the outcome's word: "accepted", "stale", "wrong_lock",
// "mark_ahead", "unverified", "missing", "malformed" or "failed"; and
// "outcome(N)" for a value that is none of them.
func (o Outcome) String() string {
	if int(o) < len(outcomeWords) && outcomeWords[o] != "" {
		return outcomeWords[o]
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// sentinel returns the error that refusals with outcome o match.
func (o Outcome) sentinel() error {
	switch o {
	case Stale:
		return ErrStale
	case WrongLock:
		return ErrWrongLock
	case MarkAhead:
		return ErrMarkAhead
	case Unverified:
		return ErrUnverified
	case Missing:
		return ErrMissing
	case Malformed:
		return ErrInvalid
	}
	return nil
}

// OutcomeOf returns the outcome that err reports: Accepted for nil, the
// Outcome of the first *RefusedError in err's tree, and Failed for any
// other error.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return Accepted
	}
	var r *RefusedError
	if errors.As(err, &r) {
		return r.Outcome
	}
	return Failed
}

// RefusedError is the error of every refused fencing token, from every
// resource of this module: Check, guard's Do, Claim and HTTP middleware,
// package grpcguard's interceptors, guard's stores, sqlguard and pgxguard,
// redisguard, objguard (Resource is the object's key), and lease.Verifier
// (Outcome Unverified, no Resource).
// errors.Is matches it with the sentinel of its Outcome: ErrStale,
// ErrWrongLock, ErrMarkAhead (and ErrStale), ErrUnverified, ErrMissing or
// ErrInvalid (Malformed); and, through Err, with the detail's own errors.
type RefusedError struct {
	// Outcome says why the token was refused: Stale, WrongLock,
	// MarkAhead, Unverified, Missing or Malformed.
	Outcome Outcome
	// Resource names the resource that refused the token: a guard
	// Target's resource, sqlguard's resource name or, in its row-column
	// mode, the table. It is empty from Check and lease.Verifier, which
	// know no resource.
	Resource string
	// Row names the refused row in sqlguard's row-column mode: the key
	// columns and values of an Upsert ("id=j1"), or the Where and
	// WhereArgs of an Update ("where (id = ?) [j1]"), at most 200 bytes.
	// It is empty otherwise. Logs never carry it.
	Row string
	// Lock is the lock the resource is bound to, when known; for
	// WrongLock it is not Token.Lock.
	Lock string
	// Token is the token that was refused; zero when Missing, or
	// Malformed text that did not parse.
	Token Token
	// Mark is the resource's mark when the token was refused: the highest
	// token it had accepted. It is zero when it had none or it was not
	// read (a wrong lock or malformed token is refused before).
	Mark Token
	// Err is the detail, when there is one: the verifier's answer
	// (Unverified), the parse error (Malformed), or the refusing
	// package's cause or advice. Unwrap returns it.
	Err error
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString("fence: ")
	if e.Resource != "" {
		fmt.Fprintf(&b, "resource %q ", e.Resource)
		if e.Row != "" {
			fmt.Fprintf(&b, "row %s ", e.Row)
		}
		b.WriteString("refused ")
	}
	b.WriteString(e.reason())
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// reason describes the refusal by its outcome.
func (e *RefusedError) reason() string {
	switch e.Outcome {
	case Stale:
		return fmt.Sprintf("stale token: lock %q revision %d is older than accepted revision %d",
			e.Token.Lock, e.Token.Revision, e.Mark.Revision)
	case WrongLock:
		return fmt.Sprintf("token for lock %q: the resource is bound to lock %q", e.Token.Lock, e.Lock)
	case MarkAhead:
		return fmt.Sprintf("the current holder of lock %q: the mark %s is ahead of the lock service, "+
			"which issued %s", e.Token.Lock, e.Mark, e.Token)
	case Unverified:
		return fmt.Sprintf("token %s: not verified", e.Token)
	case Missing:
		return "missing fencing token"
	case Malformed:
		return "malformed fencing token"
	}
	return fmt.Sprintf("token %s: %s", e.Token, e.Outcome)
}

// Is reports whether target is the sentinel of e.Outcome (see
// RefusedError); a MarkAhead refusal matches ErrStale too.
func (e *RefusedError) Is(target error) bool {
	if e.Outcome == MarkAhead && target == ErrStale {
		return true
	}
	s := e.Outcome.sentinel()
	return s != nil && target == s
}

// Unwrap returns e.Err.
func (e *RefusedError) Unwrap() error { return e.Err }
