package redisguard_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/fencekit/fencekit/internal/testsupport/spantest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/redisguard"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
)

// TestObservability: each outcome is counted under the words of guard and
// sqlguard, logged with lease's field names and traced, and the lock's
// name appears in none of them: only its hash.
func TestObservability(t *testing.T) {
	ctx := context.Background()
	cli, id := testRedis(t)
	const lock = "payroll-lock-name-that-must-not-leak"
	var logs testkit.LogBuffer
	reg := prometheus.NewPedanticRegistry()
	tp, exp := testkit.Tracing(t)
	g, err := redisguard.New(cli, redisguard.WithPrefix(id+":mark:"), redisguard.WithLogger(logs.Logger(slog.LevelDebug)),
		redisguard.WithMetrics(reg), redisguard.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	// A second Guard on the same registry shares the counter.
	if _, err := redisguard.New(cli, redisguard.WithMetrics(reg)); err != nil {
		t.Fatalf("second Guard on the registry: %v", err)
	}
	res := id + "-pay"
	tgt := guard.Target{Resource: res, Lock: lock}
	tk := func(rev int64) fence.Token { return fence.Token{Lock: lock, Revision: rev} }
	key := redisguard.Key(res, "v")

	_, _ = g.Set(ctx, tgt, tk(5), key, "x")       // set not_found
	_ = g.Claim(ctx, tk(5), res)                  // claim accepted
	_, _ = g.Set(ctx, tgt, tk(6), key, "x")       // set accepted
	_, _ = g.Set(ctx, tgt, tk(5), key, "x")       // set stale
	_, _ = g.HSet(ctx, tgt, tk(0), key, "f", "v") // hset malformed
	_, _ = g.IncrBy(ctx, tgt, tk(6), key, 1)      // incrby failed (not an integer)
	_, _ = g.Del(ctx, tgt, tk(6), "elsewhere")    // del invalid (cross slot)
	other := guard.Target{Resource: res, Lock: "other-" + lock}
	_, _ = g.Exec(ctx, other, fence.Token{Lock: other.Lock, Revision: 9}, redisguard.Set(key, "y")) // exec wrong_lock

	want := map[string]float64{
		"op=set,outcome=not_found":   1,
		"op=claim,outcome=accepted":  1,
		"op=set,outcome=accepted":    1,
		"op=set,outcome=stale":       1,
		"op=hset,outcome=malformed":  1,
		"op=incrby,outcome=failed":   1,
		"op=del,outcome=invalid":     1,
		"op=exec,outcome=wrong_lock": 1,
	}
	got := promtest.Values(t, reg, "fencekit_redisguard_decisions_total")
	if len(got) != 6*8 {
		t.Errorf("%d series, want every op and outcome (48) from the start", len(got))
	}
	for k, v := range got {
		if v != want[k] {
			t.Errorf("%s = %v, want %v", k, v, want[k])
		}
	}

	recs := logs.Records(t)
	if len(recs) != len(want) {
		t.Errorf("%d log records, want %d", len(recs), len(want))
	}
	outcomes := map[string]string{}
	for _, r := range recs {
		op, _ := r["op"].(string)
		o, _ := r["outcome"].(string)
		outcomes[op+"/"+o] = r["level"].(string)
		if r["resource"] != res {
			t.Errorf("record %v: resource %v", r, r["resource"])
		}
		if o != "wrong_lock" && r["lock"] != guard.LockHash(lock) {
			t.Errorf("record %v: lock %v, want the lock's hash", r, r["lock"])
		}
	}
	for k, level := range map[string]string{"set/accepted": "DEBUG", "set/stale": "WARN", "incrby/failed": "ERROR", "set/not_found": "WARN"} {
		if outcomes[k] != level {
			t.Errorf("record %s at %q, want %s", k, outcomes[k], level)
		}
	}

	spans := testkit.ScopeSpans(exp, "github.com/fencekit/fencekit/redisguard")
	if len(spans) != len(want) {
		t.Errorf("%d spans, want %d", len(spans), len(want))
	}
	for _, s := range spans {
		a := testkit.SpanAttrs(s)
		o := a["fencekit.outcome"].AsString()
		if !strings.HasPrefix(s.Name, "fencekit.redisguard.") || o == "" {
			t.Errorf("span %q, outcome %q", s.Name, o)
		}
		if (o == "accepted") != (s.Status.Code != codes.Error) {
			t.Errorf("span %s outcome %s has status %v", s.Name, o, s.Status.Code)
		}
	}

	for _, text := range append([]string{logs.String()}, allSpanTexts(spans)...) {
		if strings.Contains(text, lock) {
			t.Errorf("the lock's name leaked: %q", text)
		}
	}
}

func allSpanTexts(spans []spantest.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, testkit.SpanTexts(s)...)
	}
	return out
}
