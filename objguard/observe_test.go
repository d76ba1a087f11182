package objguard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/objguard"
	"go.opentelemetry.io/otel/codes"
)

// TestSpans: one span per fenced call, named by op, with the outcome word
// and the revisions; a refusal has status Error; no span names the lock.
func TestSpans(t *testing.T) {
	ctx := context.Background()
	s := startStore(t)
	tp, exp := testkit.Tracing(t)
	g := s.newGuard(t, objguard.WithTracerProvider(tp))
	a, b := fence.Token{Lock: "secret-lock", Revision: 3}, fence.Token{Lock: "secret-lock", Revision: 4}
	if _, err := g.Put(ctx, "s/obj", b, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, _ = g.Put(ctx, "s/obj", a, []byte("late"))
	_ = g.Delete(ctx, "s/obj", b)
	spans := testkit.ScopeSpans(exp, "github.com/fencekit/fencekit/objguard")
	want := []struct{ name, outcome string }{
		{"fencekit.objguard.put", "accepted"}, {"fencekit.objguard.put", "stale"}, {"fencekit.objguard.delete", "accepted"},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, sp := range spans {
		attrs := testkit.SpanAttrs(sp)
		if sp.Name != want[i].name || attrs["fencekit.outcome"].AsString() != want[i].outcome {
			t.Errorf("span %d: %s outcome %v, want %s %s", i, sp.Name, attrs["fencekit.outcome"].AsInterface(), want[i].name, want[i].outcome)
		}
		if (sp.Status.Code == codes.Error) != (want[i].outcome != "accepted") {
			t.Errorf("span %d: status %v for outcome %s", i, sp.Status.Code, want[i].outcome)
		}
		for _, text := range testkit.SpanTexts(sp) {
			if strings.Contains(text, "secret-lock") {
				t.Errorf("span %d carries the lock name: %s", i, text)
			}
		}
	}
	if got := testkit.SpanAttrs(spans[1])["fencekit.mark"].AsInt64(); got != 4 {
		t.Errorf("the stale span's mark is %d, want 4", got)
	}
}
