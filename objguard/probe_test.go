package objguard_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/objguard"
)

// TestProbe: versitygw passes the conformance probe; behind a proxy that
// strips the conditional headers (and signs the requests again, as a
// store that ignores them would answer) it fails, naming exactly what was
// ignored, New refuses the store, and WithoutProbe lets an unsafe Guard
// be made. The probe leaves no object behind.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	s := startStore(t)
	if err := objguard.Probe(ctx, s.cli, s.bucket, "probe/ok"); err != nil {
		t.Fatalf("Probe on versitygw: %v", err)
	}
	if got := s.read(t, "probe/ok"); got != "" {
		t.Errorf("the probe left its key behind: %q", got)
	}
	for _, c := range []struct {
		name  string
		strip []string
		want  []string
	}{
		{"all", []string{"PUT", "DELETE"}, []string{"If-None-Match: * on PUT", "If-Match on PUT", "If-Match on DELETE"}},
		{"delete only", []string{"DELETE"}, []string{"If-Match on DELETE"}},
		{"put only", []string{"PUT"}, []string{"If-None-Match: * on PUT", "If-Match on PUT"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startProxy(t, s.srv.Endpoint, s.bucket)
			p.stripConditions(c.strip...)
			cli := newClient(t, p.URL)
			err := objguard.Probe(ctx, cli, s.bucket, "probe/"+c.name)
			var pe *objguard.ProbeError
			if !errors.As(err, &pe) || !errors.Is(err, objguard.ErrConditionsIgnored) || !slices.Equal(pe.Ignored, c.want) {
				t.Fatalf("Probe through a proxy stripping %v = %v, want a *ProbeError naming %v", c.strip, err, c.want)
			}
			if got := s.read(t, "probe/"+c.name); got != "" {
				t.Errorf("the probe left its key behind: %q", got)
			}
			g, err := objguard.New(ctx, cli, s.bucket)
			if g != nil || !errors.Is(err, objguard.ErrConditionsIgnored) {
				t.Errorf("New on the stripping store = %v, %v; want no Guard and ErrConditionsIgnored", g, err)
			}
			if _, err := objguard.New(ctx, cli, s.bucket, objguard.WithoutProbe()); err != nil {
				t.Errorf("New WithoutProbe: %v", err)
			}
		})
	}
	// What the probe protects against: on the stripping store, a stale
	// holder's late write lands over its successor's.
	p := startProxy(t, s.srv.Endpoint, s.bucket)
	p.stripConditions("PUT")
	cli := newClient(t, p.URL)
	gA, err := objguard.New(ctx, cli, s.bucket, objguard.WithoutProbe())
	if err != nil {
		t.Fatal(err)
	}
	gB := s.newGuard(t)
	a, b := fence.Token{Lock: "p", Revision: 1}, fence.Token{Lock: "p", Revision: 2}
	if _, err := gA.Put(ctx, "probe/unsafe", a, []byte("A")); err != nil {
		t.Fatal(err)
	}
	if _, err := gB.Put(ctx, "probe/unsafe", b, []byte("B")); err != nil {
		t.Fatal(err)
	}
	if _, err := gA.Put(ctx, "probe/unsafe", a, []byte("late A")); err != nil {
		t.Fatalf("A's late write on a store that ignores If-Match: %v (want it to land: that is the danger)", err)
	}
	if got := s.read(t, "probe/unsafe"); got != "late A" {
		t.Errorf("object holds %q; the unsafe store was expected to take A's late write", got)
	}
}
