package redisguard

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/observe"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// The ops of metrics, logs and spans: the Guard's methods.
const (
	opSet    = "set"
	opHSet   = "hset"
	opDel    = "del"
	opIncrBy = "incrby"
	opExec   = "exec"
	opClaim  = "claim"
)

// spec is how a Guard observes its calls (see WithMetrics, WithLogger and
// WithTracerProvider): the outcomes of fence.Outcome it decides, and two
// conditions of its own, sqlguard's words: "invalid", bad input refused
// before sending, and "not_found", no mark of this server life
// (ErrUnclaimed).
var spec = observe.Spec{
	Package:  "redisguard",
	Help:     "Fenced Set, HSet, Del, IncrBy, Exec and Claim calls by op and outcome: accepted, stale, wrong_lock, malformed, invalid, unverified, not_found (no mark of this Redis server's life), failed.",
	Ops:      []string{opSet, opHSet, opDel, opIncrBy, opExec, opClaim},
	Outcomes: []fence.Outcome{fence.Accepted, fence.Stale, fence.WrongLock, fence.Malformed, fence.Unverified, fence.Failed},
	Conditions: []observe.Condition{
		{Word: "invalid", Errs: []error{guard.ErrInvalidTarget, ErrBadCommand, ErrCrossSlot},
			Report: observe.Report{Level: slog.LevelWarn, Msg: "redisguard: fenced write refused before sending", Error: true}},
		{Word: "not_found", Errs: []error{ErrUnclaimed},
			Report: observe.Report{Level: slog.LevelWarn, Msg: "redisguard: fencing token refused",
				Status: "redisguard: resource not claimed on this Redis server"}},
	},
	Reports: map[fence.Outcome]observe.Report{
		fence.Accepted: {Level: slog.LevelDebug, Msg: "redisguard: fenced write applied"},
		fence.Failed:   {Level: slog.LevelError, Msg: "redisguard: fenced write failed", Error: true},
	},
}

// event is one decision, for the Guard's Observer.
type event = observe.Decision

// setVerifyErr records the verifier's refusal or failure.
func setVerifyErr(ev *event, err error) {
	ev.Outcome, ev.Err = fence.Failed, err
	if errors.Is(err, fence.ErrUnverified) {
		ev.Outcome = fence.Unverified
	}
}

// WithMetrics registers the Guard's Prometheus metrics on reg (nothing is
// registered globally): fencekit_redisguard_decisions_total{op,outcome}
// counts each Set, HSet, Del, IncrBy, Exec and Claim call (op "set",
// "hset", "del", "incrby", "exec", per resource of "claim") by outcome, in
// the words of packages guard and sqlguard: "accepted", "stale",
// "wrong_lock", "malformed" (an invalid token), "invalid" (a bad target,
// command or key, refused before sending), "unverified", "not_found" (no
// mark of this Redis server's life: ErrUnclaimed) and "failed" (Redis or
// the verifier failed, ctx ended, or Redis refused a command:
// ErrCommand). Label values are fixed words, never resource or lock names
// or tokens. Guards registering on the same reg share the counter.
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Registerer, reg, errors.New("redisguard: nil metrics registerer"))
	})
}

// WithLogger makes the Guard log its decisions to l: accepted at Debug,
// refusals at Warn, failures at Error, and ResetMark at Warn. Records
// carry the field names of packages lease, guard and sqlguard: "op",
// "outcome", "resource", "lock" (a hash of the lock name, see
// guard.LockHash), "fence" (the token's revision), "mark" (the mark's
// revision, when known), "fence_lock" (a hash of the token's lock when it
// is not the resource's) and, for failed and unverified, "error" with
// lock names replaced by their hashes. Never a key's value, and never an
// owner token: those never reach this package. By default nothing is
// logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Logger, l, errors.New("redisguard: nil logger"))
	})
}

// logReset logs an operator's ResetMark.
func (g *Guard) logReset(ctx context.Context, resource string, old, next fence.Token) {
	g.obs.Logger().LogAttrs(ctx, slog.LevelWarn, "redisguard: mark reset by operator",
		slog.String("resource", resource), logattr.Lock(next.Lock),
		slog.Int64("mark_old", old.Revision), slog.Int64("mark", next.Revision))
}

// WithTracerProvider makes the Guard record an OpenTelemetry span, through
// tp's tracer "github.com/fencekit/fencekit/redisguard", for each fenced
// call, a child of the span in the call's context: "fencekit.redisguard.set",
// ".hset", ".del", ".incrby", ".exec" and, per resource, ".claim". A span
// covers the checks, the script (and a retry after a verification) and
// the verifier's calls. It carries the log's fields: "fencekit.op",
// "fencekit.outcome" (the metrics' words), "fencekit.resource",
// "fencekit.lock" (a hash of the lock name), "fencekit.fence" and
// "fencekit.mark" (revisions, int64) and "fencekit.fence_lock". A span
// whose outcome is not accepted has status Error, with a description that
// names no lock. Without this option no span is started; the global
// TracerProvider is never used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.TracerProvider, tp, errors.New("redisguard: nil TracerProvider"))
	})
}
