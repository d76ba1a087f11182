package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// WithMetrics registers the Guard's Prometheus metrics on reg (nothing is
// registered globally):
//
//   - fencekit_sqlguard_decisions_total{op,outcome}: one per call of
//     Fence, Update, Upsert, Claim and Record (op "fence", "update",
//     "upsert", "claim", "record"), by outcome: "accepted" (for Record:
//     recorded), "stale", "wrong_lock", "not_found", "duplicate",
//     "retryable", "invalid" (refused before any SQL, including ErrNeedTx),
//     "unverified" (refused by the Verifier of WithVerifier), or "error"
//     (anything else: the context ended, a driver error, a verifier that
//     could not tell, an unknown commit). RunTx counts each attempt's Fence as op "fence";
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

// The op and outcome label values.
var (
	metricOps      = []string{"fence", "update", "upsert", "claim", "record"}
	metricOutcomes = []string{"accepted", "stale", "wrong_lock", "not_found", "duplicate", "retryable", "invalid", "unverified", "error"}
)

type metrics struct {
	decisions *prometheus.CounterVec // op, outcome
	retries   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_sqlguard_decisions_total",
			Help: "Fence, Update, Upsert, Claim and Record calls by op and outcome: accepted, stale, wrong_lock, not_found, duplicate, retryable, invalid, unverified, error.",
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
	switch {
	case err == nil:
		return "accepted"
	case errors.Is(err, ErrUnverified):
		return "unverified"
	case errors.Is(err, ErrStale):
		return "stale"
	case errors.Is(err, ErrWrongLock):
		return "wrong_lock"
	case errors.Is(err, ErrDuplicate):
		return "duplicate"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNeedTx):
		return "invalid"
	case errors.Is(err, ErrRetryable):
		return "retryable"
	}
	return "error"
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
	var attrs []slog.Attr
	var stale *StaleError
	var cl *ClusterError
	var wrong *WrongLockError
	var dup *DuplicateError
	var unv *UnverifiedError
	msg := "sqlguard: fencing token refused"
	switch {
	case errors.As(err, &unv):
		// The verifier's text may quote the token, lock name included:
		// log the lock's hash in its place.
		attrs = []slog.Attr{logattr.Lock(unv.Token.Lock), logattr.Fence(unv.Token.Revision),
			slog.String("error", strings.ReplaceAll(unv.Err.Error(), unv.Token.Lock, logattr.Hash(unv.Token.Lock)))}
	case errors.As(err, &cl):
		attrs = []slog.Attr{slog.String("resource", cl.Resource), logattr.Lock(cl.Current.Lock),
			logattr.Fence(cl.Token.Revision), slog.Int64("mark", cl.Current.Revision),
			slog.String("mark_cluster", cl.MarkCluster), slog.String("cluster", cl.Cluster)}
	case errors.As(err, &stale):
		attrs = []slog.Attr{slog.String("resource", stale.Resource), logattr.Lock(stale.Current.Lock),
			logattr.Fence(stale.Token.Revision), slog.Int64("mark", stale.Current.Revision)}
		if stale.Token.Lock != stale.Current.Lock {
			attrs = append(attrs, slog.String("fence_lock", logattr.Hash(stale.Token.Lock)))
		}
	case errors.As(err, &wrong):
		attrs = []slog.Attr{slog.String("resource", wrong.Resource), logattr.Lock(wrong.Want),
			logattr.Fence(wrong.Token.Revision), slog.String("fence_lock", logattr.Hash(wrong.Token.Lock))}
	case errors.As(err, &dup):
		msg = "sqlguard: duplicate request refused"
		attrs = []slog.Attr{slog.String("request", logattr.Hash(dup.RequestID))}
	default:
		return err
	}
	if !g.log.Enabled(ctx, slog.LevelWarn) {
		return err
	}
	attrs = append([]slog.Attr{slog.String("op", op), logattr.Outcome(o)}, attrs...)
	g.log.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
	return err
}
