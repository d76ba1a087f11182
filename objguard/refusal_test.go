package objguard_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/objguard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeVerifier confirms the tokens in ok, refuses others, and fails with
// err when err is set.
type fakeVerifier struct {
	ok    map[fence.Token]bool
	err   error
	calls int
}

func (v *fakeVerifier) Verify(_ context.Context, t fence.Token) error {
	v.calls++
	switch {
	case v.err != nil:
		return v.err
	case v.ok[t]:
		return nil
	}
	return &fence.RefusedError{Outcome: fence.Unverified, Token: t, Err: errors.New("no such holder")}
}

// TestRefusals: every refusal outcome, with its error, metric and log
// word; nothing is written by a refused write.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	s := startStore(t)
	reg := prometheus.NewRegistry()
	var logs testkit.LogBuffer
	old, cur := fence.Token{Lock: "jobs", Revision: 10}, fence.Token{Lock: "jobs", Revision: 20}
	forged := fence.Token{Lock: "jobs", Revision: 99}
	v := &fakeVerifier{ok: map[fence.Token]bool{old: true, cur: true}}
	g := s.newGuard(t, objguard.WithVerifier(v), objguard.WithMetrics(reg), objguard.WithLogger(logs.Logger(slog.LevelDebug)))
	const key = "r/obj"
	if _, err := g.Put(ctx, key, old, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Put(ctx, key, cur, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		tok     fence.Token
		outcome fence.Outcome
		is      error
	}{
		{"missing", fence.Token{}, fence.Missing, fence.ErrMissing},
		{"malformed", fence.Token{Lock: "jobs", Revision: -1}, fence.Malformed, fence.ErrInvalid},
		{"malformed name", fence.Token{Lock: "a/b", Revision: 3}, fence.Malformed, fence.ErrInvalid},
		{"stale", old, fence.Stale, fence.ErrStale},
		{"wrong lock", fence.Token{Lock: "other", Revision: 50}, fence.WrongLock, fence.ErrWrongLock},
		{"unverified", forged, fence.Unverified, fence.ErrUnverified},
	}
	for _, c := range cases {
		for _, op := range []string{"put", "delete", "purge"} {
			var err error
			switch op {
			case "put":
				_, err = g.Put(ctx, key, c.tok, []byte("refused"))
			case "delete":
				err = g.Delete(ctx, key, c.tok)
			default:
				err = g.Purge(ctx, key, c.tok)
			}
			var r *fence.RefusedError
			if !errors.As(err, &r) || r.Outcome != c.outcome || !errors.Is(err, c.is) || r.Resource != key {
				t.Errorf("%s %s = %v, want a *fence.RefusedError %s for %q", c.name, op, err, c.outcome, key)
			}
			if got := testutil.ToFloat64(counter(t, reg, op, c.outcome.String())); got < 1 {
				t.Errorf("%s %s: fencekit_objguard_decisions_total{op=%q,outcome=%q} = %v", c.name, op, op, c.outcome, got)
			}
		}
	}
	if got := s.read(t, key); got != "v2" {
		t.Errorf("object holds %q after the refusals, want v2", got)
	}
	if !strings.Contains(logs.String(), `"outcome":"wrong_lock"`) && !strings.Contains(logs.String(), "outcome=wrong_lock") {
		t.Errorf("no wrong_lock log record in\n%s", logs.String())
	}
	if strings.Contains(logs.String(), `jobs`) {
		t.Errorf("a log record names the lock:\n%s", logs.String())
	}

	// A verifier that cannot tell fails the write closed.
	v.err = errors.New("etcd unreachable")
	if _, err := g.Put(ctx, "r/new", fence.Token{Lock: "jobs", Revision: 30}, []byte("x")); err == nil || errors.Is(err, fence.ErrUnverified) {
		t.Errorf("Put with a failing verifier = %v, want a failure that is not a refusal", err)
	}
	if got := s.read(t, "r/new"); got != "" {
		t.Errorf("a write whose token could not be verified was applied: %q", got)
	}
	if got := testutil.ToFloat64(counter(t, reg, "put", "failed")); got != 1 {
		t.Errorf("failed puts counted %v, want 1", got)
	}
	v.err = nil

	// An object whose mark is not a token is neither overwritten nor deleted.
	if _, err := s.cli.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String("r/bad"),
		Body: strings.NewReader("x"), Metadata: map[string]string{objguard.MetaToken: "not a token"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Put(ctx, "r/bad", cur, []byte("y")); !errors.Is(err, objguard.ErrBadMark) {
		t.Errorf("Put over a bad mark = %v, want ErrBadMark", err)
	}
	if err := g.Delete(ctx, "r/bad", cur); !errors.Is(err, objguard.ErrBadMark) {
		t.Errorf("Delete of a bad mark = %v, want ErrBadMark", err)
	}
	if _, err := g.Put(ctx, "", cur, nil); err == nil {
		t.Error("Put of an empty key succeeded")
	}
	// A missing bucket fails at once; it is no conflict to retry.
	nb, err := objguard.New(ctx, s.cli, "no-such-bucket", objguard.WithoutProbe())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nb.Put(ctx, "k", cur, []byte("x")); err == nil || errors.Is(err, objguard.ErrContended) || errors.Is(err, fence.ErrStale) {
		t.Errorf("Put to a missing bucket = %v, want the store's error", err)
	}
}

// counter returns the decisions counter of op and outcome.
func counter(t *testing.T, reg *prometheus.Registry, op, outcome string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fencekit_objguard_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == op && labels["outcome"] == outcome {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no decisions series {op=%q,outcome=%q}", op, outcome)
	return nil
}

// TestDeleteKeepsMark: a fenced delete leaves a tombstone with the
// deleter's mark; a superseded holder's re-create is refused, Get reports
// the object as not found, the current holder may re-create it, and a
// Purge removes it and its mark.
func TestDeleteKeepsMark(t *testing.T) {
	ctx := context.Background()
	s := startStore(t)
	gA, gB := s.newGuard(t), s.newGuard(t)
	a, b := fence.Token{Lock: "d", Revision: 5}, fence.Token{Lock: "d", Revision: 8}
	const key = "d/obj"
	if _, err := gA.Put(ctx, key, a, []byte("by A")); err != nil {
		t.Fatal(err)
	}
	if err := gB.Delete(ctx, key, b); err != nil {
		t.Fatalf("B's delete: %v", err)
	}
	if err := gB.Delete(ctx, key, b); err != nil {
		t.Fatalf("B's second delete: %v", err)
	}
	if _, _, err := gB.Get(ctx, key); !errors.Is(err, objguard.ErrNotFound) {
		t.Errorf("Get of a tombstone = %v, want ErrNotFound", err)
	}
	if _, err := gA.Put(ctx, key, a, []byte("re-created by A")); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's re-create after B's delete = %v, want fence.ErrStale", err)
	}
	o, err := gA.Head(ctx, key)
	if err != nil || !o.Deleted || o.Mark != b {
		t.Errorf("Head = %+v, %v; want a tombstone with B's mark", o, err)
	}
	// Deleting a key that never existed leaves a tombstone too.
	if err := gB.Delete(ctx, "d/never", b); err != nil {
		t.Fatal(err)
	}
	if _, err := gA.Put(ctx, "d/never", a, []byte("x")); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's create after B's delete of a missing key = %v, want fence.ErrStale", err)
	}
	if _, err := gB.Put(ctx, key, b, []byte("back by B")); err != nil {
		t.Fatalf("B's re-create: %v", err)
	}
	body, o, err := gA.Get(ctx, key)
	if err != nil || string(body) != "back by B" || o.Mark != b {
		t.Errorf("Get = %q, %+v, %v; want B's bytes and mark", body, o, err)
	}
	if err := gB.Purge(ctx, key, b); err != nil {
		t.Fatalf("B's purge: %v", err)
	}
	if got := s.read(t, key); got != "" {
		t.Errorf("object after Purge: %q", got)
	}
	if err := gB.Purge(ctx, key, b); err != nil {
		t.Errorf("purge of a missing key: %v", err)
	}
}

// TestRememberedVersion: a Guard writes on the version it last wrote
// without reading; when another Guard wrote meanwhile the store refuses
// (412), the Guard reads and decides again, and forgets the version.
func TestRememberedVersion(t *testing.T) {
	ctx := context.Background()
	s := startStore(t)
	p := startProxy(t, s.srv.Endpoint, s.bucket)
	cli := newClient(t, p.URL)
	var heads int
	counting := &countingClient{Client: cli, heads: &heads}
	reg := prometheus.NewRegistry()
	gA, err := objguard.New(ctx, counting, s.bucket, objguard.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	gB, err := objguard.New(ctx, cli, s.bucket, objguard.WithoutProbe())
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := fence.Token{Lock: "m", Revision: 5}, fence.Token{Lock: "m", Revision: 7}, fence.Token{Lock: "m", Revision: 9}
	const key = "m/obj"
	for i := range 5 {
		if _, err := gA.Put(ctx, key, a, []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	probeHeads := 3 // the probe reads after each of its three refusals
	if heads != probeHeads+1 {
		t.Errorf("5 writes by one holder made %d reads, want 1", heads-probeHeads)
	}
	if _, err := gB.Put(ctx, key, b, []byte("by B")); err != nil {
		t.Fatal(err)
	}
	if _, err := gA.Put(ctx, key, a, []byte("late")); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's write on its remembered version after B's = %v, want fence.ErrStale", err)
	}
	if _, err := gA.Put(ctx, key, c, []byte("by C through A's guard")); err != nil {
		t.Errorf("a newer token through the same Guard: %v", err)
	}
	mfs, _ := reg.Gather()
	conflicts := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "fencekit_objguard_conflicts_total" {
			for _, m := range mf.GetMetric() {
				conflicts += m.GetCounter().GetValue()
			}
		}
	}
	if conflicts != 1 {
		t.Errorf("conflicts counted %v, want 1 (the stale write on the remembered version)", conflicts)
	}
	// Without the memory, every write reads first.
	heads = 0
	gN, err := objguard.New(ctx, counting, s.bucket, objguard.WithCacheSize(0), objguard.WithoutProbe())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := gN.Put(ctx, key, c, []byte{byte('x' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if heads != 3 {
		t.Errorf("3 writes without the memory made %d reads, want 3", heads)
	}
	writes, _ := p.writes()
	if _, stale, first, err := checkHistory(writes); err != nil || stale != 0 {
		t.Errorf("history: %d stale writes (%s), %v", stale, first, err)
	}
}

// countingClient counts HeadObject calls.
type countingClient struct {
	objguard.Client
	heads *int
}

func (c *countingClient) HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	*c.heads++
	return c.Client.HeadObject(ctx, in, opts...)
}
