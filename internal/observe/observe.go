// Package observe is the one decision-and-observation path of fencekit's
// guards: the Decision a guard (guard, sqlguard, redisguard) makes about
// one fencing token, and the Observer that counts it, logs it and ends its
// span, parameterised by the package (a Spec). Outcome words come only
// from fence.Outcome; a package's own conditions (sqlguard's ErrNoRow,
// redisguard's ErrUnclaimed...) stay errors, Failed decisions that a Spec
// names for the metric, the log and the span.
//
// It also holds what the packages' WithLogger, WithMetrics and
// WithTracerProvider options set (Options, Set), and the span attribute
// keys the packages share.
package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes carry what the log records carry, under the keys of
// package lease's spans; never a lock name (only its hash).
const (
	AttrOp        = attribute.Key("fencekit.op")         // the operation, as the log's "op"
	AttrOutcome   = attribute.Key("fencekit.outcome")    // the metric's outcome word, as the log's "outcome"
	AttrResource  = attribute.Key("fencekit.resource")   // as the log's "resource"
	AttrLock      = attribute.Key("fencekit.lock")       // hash of the lock name, as the log's "lock"
	AttrFence     = attribute.Key("fencekit.fence")      // the token's revision, as the log's "fence"
	AttrFenceLock = attribute.Key("fencekit.fence_lock") // hash of the token's lock, when it is not the resource's
	AttrMark      = attribute.Key("fencekit.mark")       // the resource's mark, as the log's "mark"
)

// Decision is what a guard decided about one token for one resource.
type Decision struct {
	// Op is the operation: it names the span ("fencekit.<package>.<op>")
	// and, when the Spec has Ops, is the "op" label, log field and span
	// attribute.
	Op string
	// Outcome is the decision; Failed when none was made, and for a
	// package's own conditions (see Condition).
	Outcome fence.Outcome
	// Resource and Lock are the resource and the lock it is bound to.
	Resource, Lock string
	// Token is the token decided; zero when missing or unparsable.
	Token fence.Token
	// Mark is the resource's mark after the decision, when known.
	Mark fence.Token
	// Err is the refusal or failure; nil when accepted.
	Err error
	// Attrs are the package's own log fields for this decision (objguard's
	// "attempts"), after "mark" and before "error".
	Attrs []slog.Attr
}

// Condition is one of a package's own conditions: an error, not a
// fence.Outcome, reported under Word by a Failed decision whose Err matches
// one of Errs (errors.Is).
type Condition struct {
	// Word is the condition's metric label, log "outcome" and span
	// "fencekit.outcome".
	Word string
	// Errs are the sentinels whose errors the condition covers.
	Errs []error
	// Report is how the log and the span report it.
	Report Report
}

// Report is how an Observer reports one outcome in the log and the span.
type Report struct {
	// Level is the log record's level.
	Level slog.Level
	// Msg is the log record's message; "" logs no record.
	Msg string
	// Status is the span's status description for a refusal or failure;
	// "" for the error's text with lock names hashed.
	Status string
	// Error adds the error, lock names hashed, to the log record.
	Error bool
}

// Spec describes one package's observation.
type Spec struct {
	// Package names the package ("guard"): the metric
	// fencekit_<Package>_decisions_total, the tracer scope
	// github.com/fencekit/fencekit/<Package>, the spans
	// fencekit.<Package>.<op> and the default messages' prefix.
	Package string
	// Help is the metric's help text.
	Help string
	// Ops are the values of the "op" label, each counted from zero; none:
	// no op label, field or attribute.
	Ops []string
	// Outcomes are the outcomes the package decides. Without
	// ResourceLabel, each (with each Op) is counted from zero.
	Outcomes []fence.Outcome
	// ResourceLabel adds the "resource" label (guard.WithResourceLabel).
	ResourceLabel bool
	// Conditions are the package's own conditions, in the order they are
	// matched.
	Conditions []Condition
	// Reports override the default Report of outcomes (see Observer).
	Reports map[fence.Outcome]Report
	// NoFenceLock leaves out the "fence_lock" field and span attribute
	// (objguard reports a wrong lock's refusal under the resource's lock
	// alone).
	NoFenceLock bool
}

// Options are what a package's WithLogger, WithMetrics and
// WithTracerProvider set.
type Options struct {
	Logger         *slog.Logger          // nil: nothing is logged
	Registerer     prometheus.Registerer // nil: no metric
	TracerProvider trace.TracerProvider  // nil: no span
}

// Set stores v in *dst, an option's setting, or returns nilErr when v is
// nil (the zero T).
func Set[T comparable](dst *T, v T, nilErr error) error {
	var zero T
	if v == zero {
		return nilErr
	}
	*dst = v
	return nil
}

// Observer counts, logs and traces the decisions of one package. A nil
// *Observer is not valid; New makes one that does nothing for the settings
// an Options leaves nil.
//
// By default accepted decisions are logged at Debug, refusals at Warn and
// failures at Error, with "<package>: fencing token refused" for
// refusals; failed, unverified and mark-ahead records carry the error;
// span statuses are fixed texts for stale, wrong-lock, malformed and
// missing tokens, and otherwise the error with lock names hashed.
type Observer struct {
	spec    Spec
	log     *slog.Logger
	counter *prometheus.CounterVec // nil without a Registerer
	tracer  trace.Tracer           // nil without a TracerProvider
	reports [fence.Failed + 1]Report
}

// New returns the Observer of spec with the settings of o.
func New(spec Spec, o Options) (*Observer, error) {
	obs := &Observer{spec: spec, log: o.Logger}
	if obs.log == nil {
		obs.log = slog.New(slog.DiscardHandler)
	}
	if o.TracerProvider != nil {
		obs.tracer = o.TracerProvider.Tracer("github.com/fencekit/fencekit/" + spec.Package)
	}
	obs.reports = defaultReports(spec.Package)
	for out, r := range spec.Reports {
		obs.reports[out] = r
	}
	if o.Registerer != nil {
		if err := obs.register(o.Registerer); err != nil {
			return nil, fmt.Errorf("%s: register metrics: %w", spec.Package, err)
		}
	}
	return obs, nil
}

// Logger returns the Observer's logger, for a package's other records.
func (o *Observer) Logger() *slog.Logger { return o.log }

// Tracer returns the Observer's tracer, nil without a TracerProvider.
func (o *Observer) Tracer() trace.Tracer { return o.tracer }

// Start starts the span of d's decision, before it is made: named
// "fencekit.<package>.<op>", a child of ctx's span, with the op (when the
// Spec has Ops), resource and lock hash of d. It returns ctx and a nil span
// without a tracer.
func (o *Observer) Start(ctx context.Context, d Decision) (context.Context, trace.Span) {
	if o.tracer == nil {
		return ctx, nil
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	if len(o.spec.Ops) > 0 {
		attrs = append(attrs, AttrOp.String(d.Op))
	}
	attrs = append(attrs, AttrResource.String(d.Resource), AttrLock.String(logattr.Hash(d.Lock)))
	return o.tracer.Start(ctx, "fencekit."+o.spec.Package+"."+d.Op, trace.WithAttributes(attrs...))
}

// Observe counts d, logs it and, when span is not nil, records it on span
// and ends it.
func (o *Observer) Observe(ctx context.Context, span trace.Span, d Decision) {
	word, rep := o.classify(d)
	o.count(word, d)
	if rep.Msg != "" && o.log.Enabled(ctx, rep.Level) {
		o.record(ctx, word, rep, d)
	}
	if span != nil {
		o.end(span, word, rep, d)
	}
}

// Count counts d in the metric, when there is one.
func (o *Observer) Count(d Decision) {
	w, _ := o.classify(d)
	o.count(w, d)
}

// defaultReports are the Reports of pkg's outcomes by default (see
// Observer).
func defaultReports(pkg string) [fence.Failed + 1]Report {
	refused := pkg + ": fencing token refused"
	var r [fence.Failed + 1]Report
	for _, out := range fence.Outcomes() {
		r[out] = Report{Level: slog.LevelWarn, Msg: refused}
	}
	r[fence.Accepted] = Report{Level: slog.LevelDebug, Msg: pkg + ": fencing token accepted"}
	r[fence.Stale].Status = pkg + ": stale fencing token"
	r[fence.WrongLock].Status = pkg + ": fencing token for another lock"
	r[fence.Malformed].Status = pkg + ": malformed fencing token"
	r[fence.Missing].Status = pkg + ": fencing token missing"
	r[fence.Unverified].Error = true
	r[fence.MarkAhead] = Report{Level: slog.LevelError, Msg: refused, Error: true}
	r[fence.Failed] = Report{Level: slog.LevelError, Msg: pkg + ": fencing check failed", Error: true}
	return r
}

// register makes the decision counter on reg, sharing one that an
// earlier Observer of the same Spec registered there, and creates the
// series it knows of at zero.
func (o *Observer) register(reg prometheus.Registerer) error {
	var labels []string
	if len(o.spec.Ops) > 0 {
		labels = append(labels, "op")
	}
	labels = append(labels, "outcome")
	if o.spec.ResourceLabel {
		labels = append(labels, "resource")
	}
	c, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencekit_" + o.spec.Package + "_decisions_total",
		Help: o.spec.Help,
	}, labels))
	if err != nil {
		return err
	}
	o.counter = c
	if !o.spec.ResourceLabel {
		for _, w := range o.words() {
			o.series(w)
		}
	}
	return nil
}

// words are the outcome words of the Spec: its Outcomes', then its
// Conditions'.
func (o *Observer) words() []string {
	var ws []string
	for _, out := range o.spec.Outcomes {
		ws = append(ws, out.String())
	}
	for _, c := range o.spec.Conditions {
		ws = append(ws, c.Word)
	}
	return ws
}

// series creates the counters of word, for each op.
func (o *Observer) series(word string) {
	if len(o.spec.Ops) == 0 {
		o.counter.WithLabelValues(word)
		return
	}
	for _, op := range o.spec.Ops {
		o.counter.WithLabelValues(op, word)
	}
}

// Word returns d's outcome word: the Word of the first of the Conditions
// that d's error matches, when d failed, or else its Outcome's.
func (s *Spec) Word(d Decision) string {
	if c := s.condition(d); c != nil {
		return c.Word
	}
	return d.Outcome.String()
}

// condition returns the Condition of d, nil when d is not one.
func (s *Spec) condition(d Decision) *Condition {
	if d.Outcome != fence.Failed || d.Err == nil {
		return nil
	}
	for i, c := range s.Conditions {
		for _, e := range c.Errs {
			if errors.Is(d.Err, e) {
				return &s.Conditions[i]
			}
		}
	}
	return nil
}

// classify returns d's word and Report.
func (o *Observer) classify(d Decision) (string, Report) {
	if c := o.spec.condition(d); c != nil {
		return c.Word, c.Report
	}
	var r Report
	if int(d.Outcome) < len(o.reports) {
		r = o.reports[d.Outcome]
	}
	return d.Outcome.String(), r
}

// count adds d, of word, to the counter, when there is one.
func (o *Observer) count(word string, d Decision) {
	switch {
	case o.counter == nil:
	case len(o.spec.Ops) > 0:
		o.counter.WithLabelValues(d.Op, word).Inc()
	case o.spec.ResourceLabel:
		o.counter.WithLabelValues(word, d.Resource).Inc()
	default:
		o.counter.WithLabelValues(word).Inc()
	}
}

// record logs d, of word, as rep says.
func (o *Observer) record(ctx context.Context, word string, rep Report, d Decision) {
	attrs := make([]slog.Attr, 0, 8)
	if len(o.spec.Ops) > 0 {
		attrs = append(attrs, slog.String("op", d.Op))
	}
	attrs = append(attrs, logattr.Outcome(word), slog.String("resource", d.Resource), logattr.Lock(d.Lock))
	if !d.Token.IsZero() {
		attrs = append(attrs, logattr.Fence(d.Token.Revision))
		if d.Token.Lock != d.Lock && !o.spec.NoFenceLock {
			attrs = append(attrs, slog.String("fence_lock", logattr.Hash(d.Token.Lock)))
		}
	}
	if !d.Mark.IsZero() {
		attrs = append(attrs, slog.Int64("mark", d.Mark.Revision))
	}
	attrs = append(attrs, d.Attrs...)
	if rep.Error && d.Err != nil {
		attrs = append(attrs, slog.String("error", redact(d)))
	}
	o.log.LogAttrs(ctx, rep.Level, rep.Msg, attrs...)
}

// end records d, of word, on span and ends it.
func (o *Observer) end(span trace.Span, word string, rep Report, d Decision) {
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, AttrOutcome.String(word))
	if !d.Token.IsZero() {
		attrs = append(attrs, AttrFence.Int64(d.Token.Revision))
		if d.Token.Lock != d.Lock && !o.spec.NoFenceLock {
			attrs = append(attrs, AttrFenceLock.String(logattr.Hash(d.Token.Lock)))
		}
	}
	if !d.Mark.IsZero() {
		attrs = append(attrs, AttrMark.Int64(d.Mark.Revision))
	}
	span.SetAttributes(attrs...)
	if d.Outcome != fence.Accepted {
		span.SetStatus(otelcodes.Error, o.status(word, rep, d))
	}
	span.End()
}

// status describes a refusal or failure for a span's status, without lock
// names.
func (o *Observer) status(word string, rep Report, d Decision) string {
	switch {
	case rep.Status != "":
		return rep.Status
	case d.Err == nil:
		return o.spec.Package + ": " + word
	}
	return redact(d)
}

// redact is d's error text with lock names replaced by their hashes.
func redact(d Decision) string {
	return logattr.Redact(d.Err.Error(), d.Lock, d.Token.Lock, d.Mark.Lock)
}
