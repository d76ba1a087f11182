package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/observe"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes carry what the log records carry, under the keys of
// packages lease and guard (observe.AttrOutcome, AttrLock, AttrFence,
// AttrFenceLock, AttrMark, AttrResource) and these of sqlguard's own;
// never a lock name or an idempotency key (only their hashes), never an
// owner token (those never reach this package).
const (
	attrMode        = attribute.Key("fencekit.mode")         // "table" (fence table) or "row" (row column)
	attrTable       = attribute.Key("fencekit.table")        // the fence table, or the row-column table
	attrResources   = attribute.Key("fencekit.resources")    // how many resources a fence covers
	attrRows        = attribute.Key("fencekit.rows")         // rows an Update changed
	attrAttempts    = attribute.Key("fencekit.attempts")     // transactions RunTx or Claim ran
	attrRequest     = attribute.Key("fencekit.request")      // hash of an idempotency key, as the log's "request"
	attrMarkCluster = attribute.Key("fencekit.mark_cluster") // etcd cluster of a mark another cluster wrote
	attrCluster     = attribute.Key("fencekit.cluster")      // this Guard's etcd cluster (WithCluster)
)

// The modes of attrMode.
const (
	modeTable = "table"
	modeRow   = "row"
)

// WithTracerProvider makes the Guard record an OpenTelemetry span, through
// tp's tracer "github.com/fencekit/fencekit/sqlguard", for each fenced
// call, as a child of the span in the call's context:
//
//   - "fencekit.sqlguard.tx": one per RunTx, covering every attempt;
//     the function runs in its context, so the spans of its statements
//     are the span's children. Attribute "fencekit.attempts" counts the
//     transactions run, and an event "fencekit.sqlguard.retry" marks each
//     retry after a retryable error.
//   - "fencekit.sqlguard.fence": one per Fence, and per attempt of RunTx
//     (a child of its "tx" span).
//   - "fencekit.sqlguard.claim": one per Claim, with "fencekit.attempts".
//   - "fencekit.sqlguard.update" and "fencekit.sqlguard.upsert": one per
//     Update and Upsert (row-column mode), with "fencekit.rows" for Update.
//   - "fencekit.sqlguard.record": one per Record.
//
// Each span carries "fencekit.outcome", in the words of the metrics of
// WithMetrics (accepted, stale, wrong_lock, not_found, duplicate,
// retryable, invalid, unverified, error; for a RunTx, accepted means
// committed), "fencekit.mode" ("table" for the fence table, "row" for
// row-column mode), "fencekit.table" (the fence table's name, or the
// row-column table's), "fencekit.lock" (a hash of the lock name, the
// "fencekit.lock" of package lease's spans) and "fencekit.fence" (the
// token's revision, an int64). A refusal adds the fields of the log
// records of WithLogger: "fencekit.resource", "fencekit.mark",
// "fencekit.fence_lock" (a wrong-lock refusal's "fencekit.lock" is then
// the hash of the lock the resource is bound to), "fencekit.mark_cluster"
// and "fencekit.cluster"; Record's spans carry "fencekit.request", a hash
// of the idempotency key. A span whose outcome is not accepted has status
// Error; its description names no lock, idempotency key or row: a fixed
// text for stale, wrong_lock, not_found and duplicate, and otherwise the
// error with lock names and keys replaced by their hashes. Owner tokens
// never reach this package.
//
// pgxguard.Guard records the same spans when made with this option (or
// wrapping a Guard made with it). Without it the Guard records nothing and
// costs nothing; it never uses the global TracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.TracerProvider, tp, fmt.Errorf("%w: nil TracerProvider", ErrInvalid))
	})
}

// span is one traced call; a nil *span, for a Guard without a tracer,
// does nothing.
type span struct {
	s    trace.Span
	hide []string // the tokens' lock names or Record's key: hashed in the status text
}

// startSpan starts the span "fencekit.sqlguard."+op. table and tok may be
// empty and zero (Record). It returns ctx and nil without a tracer.
func (g *Guard) startSpan(ctx context.Context, op, mode, table string, tok fence.Token) (context.Context, *span) {
	tracer := g.obs.Tracer()
	if tracer == nil {
		return ctx, nil
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	if mode != "" {
		attrs = append(attrs, attrMode.String(mode))
	}
	if table != "" {
		attrs = append(attrs, attrTable.String(table))
	}
	if tok.Lock != "" {
		attrs = append(attrs, observe.AttrLock.String(logattr.Hash(tok.Lock)))
	}
	if tok.Revision != 0 {
		attrs = append(attrs, observe.AttrFence.Int64(tok.Revision))
	}
	ctx, s := tracer.Start(ctx, "fencekit.sqlguard."+op, trace.WithAttributes(attrs...))
	return ctx, &span{s: s, hide: []string{tok.Lock}}
}

// traced runs f as op "fencekit.sqlguard."+op (see startSpan), counts and
// logs its result (decided), and ends the span with it. f gets the span's
// context and the span, to add what it learns.
func (g *Guard) traced(ctx context.Context, op, mode, table string, tok fence.Token,
	f func(context.Context, *span) error) error {
	ctx, sp := g.startSpan(ctx, op, mode, table, tok)
	err := g.decided(ctx, op, f(ctx, sp))
	sp.end(err)
	return err
}

// hideLocks adds the lock names of fences to the names the span's status
// hashes.
func (s *span) hideLocks(fences map[string]fence.Token) {
	if s != nil {
		for _, t := range fences {
			s.hide = append(s.hide, t.Lock)
		}
	}
}

// setInt sets an integer attribute.
func (s *span) setInt(k attribute.Key, v int) {
	if s != nil {
		s.s.SetAttributes(k.Int(v))
	}
}

// retried records the retry of a transaction after attempt failed.
func (s *span) retried(attempt int) {
	if s != nil {
		s.s.AddEvent("fencekit.sqlguard.retry", trace.WithAttributes(attrAttempts.Int(attempt)))
	}
}

// end records the outcome err and ends the span.
func (s *span) end(err error) {
	if s == nil {
		return
	}
	attrs := append(make([]attribute.KeyValue, 0, 6), observe.AttrOutcome.String(outcome(err)))
	if err == nil {
		s.s.SetAttributes(attrs...)
		s.s.End()
		return
	}
	hide := slices.Clone(s.hide)
	var r *fence.RefusedError
	var dup *DuplicateError
	switch {
	case errors.As(err, &r):
		hide, attrs = refusalSpan(r, hide, attrs)
	case errors.As(err, &dup):
		hide = append(hide, dup.RequestID)
	}
	s.s.SetAttributes(attrs...)
	s.s.SetStatus(otelcodes.Error, statusText(err, hide))
	s.s.End()
}

// statusText describes the refusal err for a span's status without the
// strings in hide (lock names, idempotency keys) nor row keys.
func statusText(err error, hide []string) string {
	switch outcome(err) {
	case fence.MarkAhead.String():
		return "sqlguard: stale fencing token: the mark is another etcd cluster's; see ResetMark"
	case fence.Stale.String():
		return "sqlguard: stale fencing token"
	case fence.WrongLock.String():
		return "sqlguard: fencing token for another lock"
	case wordNotFound:
		return "sqlguard: no row matches"
	case wordDuplicate:
		return "sqlguard: duplicate request"
	}
	return logattr.Redact(err.Error(), hide...)
}

// refusalSpan adds the span attributes of the refusal r to attrs, and the
// lock names its status must not show to hide.
func refusalSpan(r *fence.RefusedError, hide []string, attrs []attribute.KeyValue) ([]string, []attribute.KeyValue) {
	switch r.Outcome {
	case fence.Unverified:
		return append(hide, r.Token.Lock), attrs
	case fence.WrongLock:
		return append(hide, r.Lock), append(attrs, observe.AttrResource.String(r.Resource), observe.AttrLock.String(logattr.Hash(r.Lock)),
			observe.AttrFenceLock.String(logattr.Hash(r.Token.Lock)))
	}
	attrs = append(attrs, observe.AttrResource.String(r.Resource), observe.AttrMark.Int64(r.Mark.Revision))
	var cl *clusterError
	if errors.As(r.Err, &cl) {
		attrs = append(attrs, attrMarkCluster.String(cl.markCluster), attrCluster.String(cl.cluster))
	}
	if r.Token.Lock != r.Lock {
		attrs = append(attrs, observe.AttrLock.String(logattr.Hash(r.Lock)), observe.AttrFenceLock.String(logattr.Hash(r.Token.Lock)))
	}
	return hide, attrs
}
