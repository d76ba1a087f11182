package guard

import (
	"errors"

	"github.com/fencekit/fencekit/internal/observe"
	"go.opentelemetry.io/otel/trace"
)

// WithTracerProvider makes the Guard record an OpenTelemetry span, through
// tp's tracer "github.com/fencekit/fencekit/guard", for each fencing
// decision: one per Do, per Serve (so per request of the HTTP middleware
// and per call of package grpcguard's server interceptors) and per
// resource of Claim, named "fencekit.guard.do", "fencekit.guard.serve" and
// "fencekit.guard.claim". A span is a child of the span in the caller's
// context (the request's, with otelhttp or otelgrpc). It covers the wait
// for the resource and the check (the Store and the Verifier, whose own
// spans are its children), and ends before write runs: write's context is
// the caller's, not a child of the Guard's span.
//
// Each span carries the fields of the log records of WithLogger:
// "fencekit.outcome" (the fence.Outcome: accepted, stale, wrong_lock,
// mark_ahead, unverified, missing, malformed, failed), "fencekit.resource" (the resource name),
// "fencekit.lock" (LockHash of the Target's lock, the "fencekit.lock" of
// package lease's spans), "fencekit.fence" (the token's revision, an
// int64), "fencekit.fence_lock" (LockHash of the token's lock, when it is
// another) and "fencekit.mark" (the mark's revision, when known). A span
// whose outcome is not accepted has status Error with a description that
// names no lock: the outcome's words, or for failed and unverified the
// error with lock names replaced by their hashes. Owner tokens never reach
// this package.
//
// Without it the Guard records no spans and costs nothing; it never uses
// the global TracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.TracerProvider, tp, errors.New("guard: nil TracerProvider"))
	})
}

// The operations of decisions: spans are named "fencekit.guard." + op.
const (
	opDo    = "do"
	opServe = "serve"
	opClaim = "claim"
)
