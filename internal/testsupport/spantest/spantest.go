// Package spantest records OpenTelemetry spans in memory for tests: a
// trace.TracerProvider built on the trace API alone, so that the tests of
// the library need no OpenTelemetry SDK (and the library's go.mod lists
// none). It follows the SDK where tests look: a span keeps the last value
// of each attribute key, a status never goes down from Ok, an Error status
// keeps its description, RecordError adds an "exception" event, and spans
// are listed in the order they ended.
package spantest

import (
	"context"
	"crypto/rand"
	"fmt"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Recorder is a TracerProvider that keeps every span that ended. It is safe
// for concurrent use.
type Recorder struct {
	embedded.TracerProvider

	mu    sync.Mutex
	ended []Span
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Tracer returns a tracer whose spans carry name as their scope.
func (r *Recorder) Tracer(name string, _ ...trace.TracerOption) trace.Tracer {
	return &tracer{r: r, scope: name}
}

// GetSpans returns the spans that ended, in the order they ended.
func (r *Recorder) GetSpans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.ended...)
}

// Reset forgets the spans recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = nil
}

// Span is what a span recorded.
type Span struct {
	Name        string
	Scope       string // the name of the tracer that started it
	SpanContext trace.SpanContext
	Parent      trace.SpanContext
	Kind        trace.SpanKind
	Attributes  []attribute.KeyValue
	Events      []Event
	Links       []Link
	Status      Status
	StartTime   time.Time
	EndTime     time.Time
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// Event is an event of a span.
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
	Time       time.Time
}

// Link is a link of a span.
type Link struct {
	SpanContext trace.SpanContext
	Attributes  []attribute.KeyValue
}

type tracer struct {
	embedded.Tracer
	r     *Recorder
	scope string
}

func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	var parent trace.SpanContext
	if !cfg.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	scc := trace.SpanContextConfig{TraceFlags: trace.FlagsSampled}
	if parent.IsValid() {
		scc.TraceID = parent.TraceID()
	} else {
		_, _ = rand.Read(scc.TraceID[:])
	}
	_, _ = rand.Read(scc.SpanID[:])
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s := &span{t: t, rec: Span{
		Name: name, Scope: t.scope, SpanContext: trace.NewSpanContext(scc), Parent: parent,
		Kind: cfg.SpanKind(), StartTime: start,
	}}
	s.setAttributes(cfg.Attributes()...)
	for _, l := range cfg.Links() {
		s.rec.Links = append(s.rec.Links, Link{SpanContext: l.SpanContext, Attributes: l.Attributes})
	}
	return trace.ContextWithSpan(ctx, s), s
}

type span struct {
	embedded.Span
	t *tracer

	mu    sync.Mutex
	rec   Span
	ended bool
}

func (s *span) End(opts ...trace.SpanEndOption) {
	cfg := trace.NewSpanEndConfig(opts...)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.rec.EndTime = cfg.Timestamp()
	if s.rec.EndTime.IsZero() {
		s.rec.EndTime = time.Now()
	}
	rec := s.rec
	s.mu.Unlock()
	r := s.t.r
	r.mu.Lock()
	r.ended = append(r.ended, rec)
	r.mu.Unlock()
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.rec.Events = append(s.rec.Events, Event{Name: name, Attributes: cfg.Attributes(), Time: cfg.Timestamp()})
	}
}

func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.rec.Links = append(s.rec.Links, Link{SpanContext: l.SpanContext, Attributes: l.Attributes})
	}
}

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// RecordError adds an "exception" event, as the SDK does.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(
		attribute.String("exception.type", typeName(err)),
		attribute.String("exception.message", err.Error())))
	s.AddEvent("exception", opts...)
}

func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

func (s *span) SpanContext() trace.SpanContext { return s.rec.SpanContext }

func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.rec.Status.Code > code {
		return
	}
	st := Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	s.rec.Status = st
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.rec.Name = name
	}
}

func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.setAttributes(kv...)
	}
}

// setAttributes keeps the last value of each key, in the order keys first
// appeared. s.mu is held (or s is new).
func (s *span) setAttributes(kv ...attribute.KeyValue) {
	for _, a := range kv {
		if !a.Valid() {
			continue
		}
		replaced := false
		for i := range s.rec.Attributes {
			if s.rec.Attributes[i].Key == a.Key {
				s.rec.Attributes[i] = a
				replaced = true
				break
			}
		}
		if !replaced {
			s.rec.Attributes = append(s.rec.Attributes, a)
		}
	}
}

func (s *span) TracerProvider() trace.TracerProvider { return s.t.r }
