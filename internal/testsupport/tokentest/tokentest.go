// Package tokentest checks how a transport's token reader (guard's
// TokenFromHeader, grpcguard's TokenFromMetadata) answers a request that
// carried zero, one or several token values, for their fuzz tests.
package tokentest

import (
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// Values returns the first n%3 of a and b: no value, one, or two.
func Values(a, b string, n uint8) []string {
	return []string{a, b}[:n%3]
}

// Check checks the answer (tok, err) of a token reader for a request that
// carried vs: missing for none, malformed for several, and for one exactly
// what fence.Parse says, as a valid token whose text form is the value
// itself.
func Check(t *testing.T, vs []string, tok fence.Token, err error) {
	t.Helper()
	switch len(vs) {
	case 0:
		if !errors.Is(err, fence.ErrMissing) || errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("no value: %v, want ErrMissing", err)
		}
	case 1:
		checkOne(t, vs[0], tok, err)
	default:
		if !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("%d values: %v, want ErrMalformed", len(vs), err)
		}
	}
	if err != nil && !tok.IsZero() {
		t.Fatalf("error %v with a non-zero token %#v", err, tok)
	}
}

// checkOne checks the answer for the one value v.
func checkOne(t *testing.T, v string, tok fence.Token, err error) {
	t.Helper()
	want, perr := fence.Parse(v)
	if perr != nil {
		if !errors.Is(err, fence.ErrInvalid) || !errors.Is(err, fence.ErrSyntax) || errors.Is(err, fence.ErrMissing) {
			t.Fatalf("value %q: %v, want ErrMalformed and fence.ErrSyntax", v, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("value %q parses as %v, but: %v", v, want, err)
	}
	if tok != want || tok.String() != v {
		t.Fatalf("value %q: token %#v, want %#v in canonical form", v, tok, want)
	}
	if verr := tok.Validate(); verr != nil {
		t.Fatalf("value %q: accepted an invalid token: %v", v, verr)
	}
}

// Fuzz fuzzes a token reader: read returns its answer for a request that
// carried the values vs (none, one or two of the fuzzed strings), which
// Check checks. seeds are more (a, b, n) inputs besides a valid token, two
// and none.
func Fuzz(f *testing.F, read func(vs []string) (fence.Token, error), seeds ...Seed) {
	f.Add("42:orders", "", uint8(1))
	f.Add("", "", uint8(0))
	for _, s := range seeds {
		f.Add(s.A, s.B, s.N)
	}
	f.Fuzz(func(t *testing.T, a, b string, n uint8) {
		vs := Values(a, b, n)
		tok, err := read(vs)
		Check(t, vs, tok, err)
	})
}

// Seed is one input of Fuzz: the values a and b, of which the request
// carries the first n%3.
type Seed struct {
	A, B string
	N    uint8
}
