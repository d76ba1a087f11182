package fencelock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrDurations reports elector durations that cannot keep the
	// no-overlap rule with the Lock's TTL; the error is a *DurationError.
	ErrDurations = errors.New("fencelock: elector durations cannot keep leaders apart")
	// ErrNotLeading reports that the Lock leads no term at the moment.
	ErrNotLeading = errors.New("fencelock: not leading")
	// ErrTermEnded reports an Update of a term that has ended: the elector
	// must stop leading (it does, within its RenewDeadline).
	ErrTermEnded = errors.New("fencelock: term ended")
	// ErrExpiring reports, from Check, a term whose validity is about to
	// end.
	ErrExpiring = errors.New("fencelock: term about to expire")
	// ErrShortValidity reports a confirmation that left the term less
	// valid time than the elector may take to notice a loss
	// (RetryPeriod + RenewDeadline); the elector retries.
	ErrShortValidity = errors.New("fencelock: term confirmed with too little validity left")
	// ErrIdentity reports a record written for another identity than the
	// Lock's, or a bad identity given to New.
	ErrIdentity = errors.New("fencelock: identity mismatch")
	// ErrConfig reports an elector configuration the Lock cannot serve (a
	// missing callback, another Lock, Coordinated election).
	ErrConfig = errors.New("fencelock: unsupported elector configuration")
	// ErrClosed reports use of a closed Lock.
	ErrClosed = errors.New("fencelock: closed")
)

// DurationError names the elector durations that break the timing rule
// (see the package doc) and what they would have to be.
type DurationError struct {
	// TTL and Margin are the Lock's session TTL and safety margin.
	TTL, Margin time.Duration
	// LeaseDuration, RenewDeadline and RetryPeriod are the durations
	// given.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Change names the durations to change, in the order of the rules
	// broken, for example ["RenewDeadline", "RetryPeriod"] (or "TTL").
	Change []string
	// Rules states each rule broken.
	Rules []string
}

// Error says which rules the durations break and what to change.
func (e *DurationError) Error() string {
	return fmt.Sprintf("fencelock: elector durations (LeaseDuration %v, RenewDeadline %v, RetryPeriod %v) with TTL %v and margin %v: %s; change %s",
		e.LeaseDuration, e.RenewDeadline, e.RetryPeriod, e.TTL, e.Margin,
		strings.Join(e.Rules, "; "), strings.Join(e.Change, " or "))
}

// Is reports whether target is ErrDurations.
func (e *DurationError) Is(target error) bool { return target == ErrDurations }
