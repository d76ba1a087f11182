package testkit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/owner"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/internal/testsupport/spantest"
)

// Tracing returns a new span recorder twice: as the TracerProvider to
// give the code under test, and as the exporter to read ended spans from.
func Tracing(testing.TB) (*spantest.Recorder, *spantest.Recorder) {
	rec := spantest.NewRecorder()
	return rec, rec
}

// SpanTexts returns every text a span carries: its name, status
// description, and "key=value" for each attribute of the span, its events
// and its links, for tests that look for what must not be there.
func SpanTexts(s spantest.Span) []string {
	texts := []string{s.Name, s.Status.Description}
	for _, a := range s.Attributes {
		texts = append(texts, string(a.Key)+"="+fmt.Sprint(a.Value.AsInterface()))
	}
	for _, e := range s.Events {
		texts = append(texts, e.Name)
		for _, a := range e.Attributes {
			texts = append(texts, string(a.Key)+"="+fmt.Sprint(a.Value.AsInterface()))
		}
	}
	for _, l := range s.Links {
		for _, a := range l.Attributes {
			texts = append(texts, string(a.Key)+"="+fmt.Sprint(a.Value.AsInterface()))
		}
	}
	return texts
}

// ScopeSpans returns the spans exp holds from the tracer named scope (a
// package's import path).
func ScopeSpans(exp *spantest.Recorder, scope string) []spantest.Span {
	var out []spantest.Span
	for _, s := range exp.GetSpans() {
		if s.Scope == scope {
			out = append(out, s)
		}
	}
	return out
}

// SpanAttrs returns a span's attributes by key.
func SpanAttrs(s spantest.Span) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(s.Attributes))
	for _, a := range s.Attributes {
		m[a.Key] = a.Value
	}
	return m
}

// NoOwnerTokens fails t for every text of spans (see SpanTexts) that
// carries one of tokens (holder -> raw owner token, see OwnerToken),
// whole or its random part.
func NoOwnerTokens(t testing.TB, spans []spantest.Span, tokens map[string]string) {
	t.Helper()
	for _, s := range spans {
		for _, text := range SpanTexts(s) {
			for who, tk := range tokens {
				random := tk[strings.LastIndexByte(tk, '.')+1:]
				if strings.Contains(text, tk) || strings.Contains(text, random) {
					t.Errorf("span %s carries %s's owner token: %q", s.Name, who, text)
				}
			}
		}
	}
}

// OwnerToken reads from etcd the raw owner token of l, for tests that
// check it appears nowhere: the record values under the lock's directory
// (default prefix) are "<owner token>#<hold count>[#payload]", and the one
// whose digest is l's belongs to l.
func OwnerToken(t testing.TB, ctx context.Context, cli *clientv3.Client, l *lease.Lease) string {
	t.Helper()
	resp, err := cli.Get(ctx, lease.DefaultPrefix+l.Name()+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read lock records: %v", err)
	}
	for _, kv := range resp.Kvs {
		v, _, _ := strings.Cut(string(kv.Value), "#")
		if tok, err := owner.Parse(v); err == nil && tok.Digest() == l.OwnerDigest() {
			return tok.Value()
		}
	}
	t.Fatalf("no record of %v", l)
	return ""
}

// TracesNothing runs f in the context of a caller's span "request" while
// another provider is the global one, and fails t unless the caller's
// span is all that was recorded, with nothing added to it, and nothing
// went through the global provider: for code that must trace nothing
// without a TracerProvider of its own.
func TracesNothing(t testing.TB, f func(ctx context.Context)) {
	t.Helper()
	tp, exp := Tracing(t)
	globalTP, globalExp := Tracing(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(globalTP)
	defer otel.SetTracerProvider(prev)

	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	f(ctx)
	parent.End()

	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "request" {
		t.Fatalf("spans %v, want only the caller's", spans)
	}
	if s := spans[0]; len(s.Attributes) != 0 || len(s.Events) != 0 || s.Status.Code != codes.Unset {
		t.Errorf("the caller's span got attributes %v, events %v, status %v", s.Attributes, s.Events, s.Status)
	}
	if n := len(globalExp.GetSpans()); n != 0 {
		t.Errorf("%d spans on the global provider", n)
	}
}
