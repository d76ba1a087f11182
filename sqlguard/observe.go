package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/observe"
	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// WithMetrics registers the Guard's Prometheus metrics on reg (nothing is
// registered globally):
//
//   - fencekit_sqlguard_decisions_total{op,outcome}: one per call of
//     Fence, Update, Upsert, Claim and Record (op "fence", "update",
//     "upsert", "claim", "record"), by outcome: the words of
//     fence.Outcome for a fencing decision, "accepted" (for Record:
//     recorded), "stale", "wrong_lock", "mark_ahead" (a mark of another
//     etcd cluster, ErrOtherCluster), "unverified" (refused by the
//     Verifier of WithVerifier) or "failed" (anything else: the context
//     ended, a driver error, a verifier that could not tell, an unknown
//     commit); and this package's own: "not_found" (ErrNoRow),
//     "duplicate", "retryable", "invalid" (refused before any SQL,
//     including ErrNeedTx). RunTx counts each attempt's Fence as op "fence";
//     Claim counts once, with its final result, as op "claim".
//   - fencekit_sqlguard_retries_total: transactions RunTx or Claim ran
//     again after a retryable error.
//
// Label values are fixed words, never resource names, lock names or
// tokens. Guards registering on the same reg share the collectors.
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Registerer, reg, fmt.Errorf("%w: nil metrics registerer", ErrInvalid))
	})
}

// WithLogger makes the Guard log its refusals to l at Warn: a stale,
// wrong-lock or unverified token (from Fence, Update, Upsert or Claim), a
// duplicate idempotency key (Record), and a ResetMark. Records carry the field names of package
// lease's and package guard's records, so that a refusal joins to the
// acquisition of the refused token: "op", "outcome" ("stale", "wrong_lock"
// or "duplicate"), "resource" (the resource name, or the table in
// row-column mode), "lock" (a hash of the lock the resource is bound to,
// the same as lease's "lock"), "fence" (the refused token's revision),
// "fence_lock" (a hash of the token's lock, when it differs from "lock"),
// "mark" (the revision the database holds), for a mark of another etcd
// cluster "mark_cluster" and "cluster" (see WithCluster) and, for a
// duplicate, "request"
// (a hash of the idempotency key). By default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Logger, l, fmt.Errorf("%w: nil logger", ErrInvalid))
	})
}

// The words of sqlguard's own conditions: errors, never a fence.Outcome,
// that its metric, log and spans name.
const (
	wordNotFound  = "not_found"
	wordDuplicate = "duplicate"
)

// spec is how a Guard counts its calls (see WithMetrics): by op, and by the
// outcomes of fence.Outcome it decides or the word of its own condition.
// Its log records and spans are its own (see decided and span).
var spec = observe.Spec{
	Package:  "sqlguard",
	Help:     "Fence, Update, Upsert, Claim and Record calls by op and outcome: accepted, stale, wrong_lock, mark_ahead, not_found, duplicate, retryable, invalid, unverified, failed.",
	Ops:      []string{"fence", "update", "upsert", "claim", "record"},
	Outcomes: []fence.Outcome{fence.Accepted, fence.Stale, fence.WrongLock, fence.MarkAhead, fence.Unverified, fence.Failed},
	Conditions: []observe.Condition{
		{Word: wordDuplicate, Errs: []error{ErrDuplicate}},
		{Word: wordNotFound, Errs: []error{ErrNoRow}},
		{Word: "invalid", Errs: []error{ErrInvalid, ErrNeedTx}},
		{Word: "retryable", Errs: []error{ErrRetryable}},
	},
}

// newRetries registers fencekit_sqlguard_retries_total on reg; nil
// without reg.
func newRetries(reg prometheus.Registerer) (prometheus.Counter, error) {
	if reg == nil {
		return nil, nil
	}
	c, err := promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencekit_sqlguard_retries_total",
		Help: "Transactions RunTx or Claim ran again after a retryable error.",
	}))
	if err != nil {
		return nil, fmt.Errorf("sqlguard: register metrics: %w", err)
	}
	return c, nil
}

// decision is the decision whose result is err.
func decision(op string, err error) observe.Decision {
	return observe.Decision{Op: op, Outcome: fence.OutcomeOf(err), Err: err}
}

// outcome names the result err of a decision for metrics, logs and spans.
func outcome(err error) string { return spec.Word(decision("", err)) }

// decidedIfErr is decided for a failure only: a step that passed is not a
// decision yet.
func (g *Guard) decidedIfErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	return g.decided(ctx, op, err)
}

// decided counts and logs the result err of op, and returns err.
func (g *Guard) decided(ctx context.Context, op string, err error) error {
	d := decision(op, err)
	g.obs.Count(d)
	if err == nil || !g.obs.Logger().Enabled(ctx, slog.LevelWarn) {
		return err
	}
	var attrs []slog.Attr
	var r *fence.RefusedError
	var dup *DuplicateError
	msg := "sqlguard: fencing token refused"
	switch {
	case errors.As(err, &r):
		attrs = refusalAttrs(r)
	case errors.As(err, &dup):
		msg = "sqlguard: duplicate request refused"
		attrs = []slog.Attr{slog.String("request", logattr.Hash(dup.RequestID))}
	default:
		return err
	}
	attrs = append([]slog.Attr{slog.String("op", op), logattr.Outcome(spec.Word(d))}, attrs...)
	g.obs.Logger().LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
	return err
}

// refusalAttrs are the log fields of a refusal.
func refusalAttrs(r *fence.RefusedError) []slog.Attr {
	if r.Outcome == fence.Unverified {
		// The verifier's text may quote the token, lock name included:
		// log the lock's hash in its place.
		return []slog.Attr{logattr.Lock(r.Token.Lock), logattr.Fence(r.Token.Revision),
			slog.String("error", strings.ReplaceAll(r.Err.Error(), r.Token.Lock, logattr.Hash(r.Token.Lock)))}
	}
	attrs := []slog.Attr{slog.String("resource", r.Resource), logattr.Lock(r.Lock), logattr.Fence(r.Token.Revision)}
	if r.Outcome != fence.WrongLock {
		attrs = append(attrs, slog.Int64("mark", r.Mark.Revision))
	}
	if r.Token.Lock != r.Lock {
		attrs = append(attrs, slog.String("fence_lock", logattr.Hash(r.Token.Lock)))
	}
	var cl *clusterError
	if errors.As(r.Err, &cl) {
		attrs = append(attrs, slog.String("mark_cluster", cl.markCluster), slog.String("cluster", cl.cluster))
	}
	return attrs
}
