package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
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
		if reg == nil {
			return fmt.Errorf("%w: nil metrics registerer", ErrInvalid)
		}
		c.registerer = reg
		return nil
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
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		c.logger = l
		return nil
	})
}

// The outcome label values of fencing decisions, in fence.Outcome's words.
var (
	outAccepted   = fence.Accepted.String()
	outStale      = fence.Stale.String()
	outWrongLock  = fence.WrongLock.String()
	outMarkAhead  = fence.MarkAhead.String()
	outUnverified = fence.Unverified.String()
	outFailed     = fence.Failed.String()
)

// The op and outcome label values.
var (
	metricOps      = []string{"fence", "update", "upsert", "claim", "record"}
	metricOutcomes = []string{outAccepted, outStale, outWrongLock, outMarkAhead, "not_found", "duplicate", "retryable", "invalid", outUnverified, outFailed}
)

type metrics struct {
	decisions *prometheus.CounterVec // op, outcome
	retries   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_sqlguard_decisions_total",
			Help: "Fence, Update, Upsert, Claim and Record calls by op and outcome: accepted, stale, wrong_lock, mark_ahead, not_found, duplicate, retryable, invalid, unverified, failed.",
		}, []string{"op", "outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencekit_sqlguard_retries_total",
			Help: "Transactions RunTx or Claim ran again after a retryable error.",
		}),
	}
	var errs [2]error
	m.decisions, errs[0] = promreg.Register(reg, m.decisions)
	m.retries, errs[1] = promreg.Register(reg, m.retries)
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("sqlguard: register metrics: %w", err)
	}
	for _, op := range metricOps {
		for _, o := range metricOutcomes {
			m.decisions.WithLabelValues(op, o)
		}
	}
	return m, nil
}

// outcome names the result err of a decision for metrics and logs.
func outcome(err error) string {
	if o := fence.OutcomeOf(err); o != fence.Failed {
		return o.String()
	}
	switch {
	case errors.Is(err, ErrDuplicate):
		return "duplicate"
	case errors.Is(err, ErrNoRow):
		return "not_found"
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNeedTx):
		return "invalid"
	case errors.Is(err, ErrRetryable):
		return "retryable"
	}
	return outFailed
}

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
	o := outcome(err)
	if g.met != nil {
		g.met.decisions.WithLabelValues(op, o).Inc()
	}
	if err == nil || !g.log.Enabled(ctx, slog.LevelWarn) {
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
	attrs = append([]slog.Attr{slog.String("op", op), logattr.Outcome(o)}, attrs...)
	g.log.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
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
