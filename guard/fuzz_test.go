package guard_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
)

// values returns the first n%3 of a and b: no value, one, or two.
func values(a, b string, n uint8) []string {
	return []string{a, b}[:n%3]
}

// checkTokenFrom checks the answer of TokenFromHeader
// for a request that carried vs: missing for none, malformed for several,
// and for one exactly what fence.Parse says, as a valid token whose text
// form is the value itself.
func checkTokenFrom(t *testing.T, vs []string, tok fence.Token, err error) {
	t.Helper()
	switch len(vs) {
	case 0:
		if !errors.Is(err, fence.ErrMissing) || errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("no value: %v, want ErrMissing", err)
		}
	case 1:
		want, perr := fence.Parse(vs[0])
		if perr != nil {
			if !errors.Is(err, fence.ErrInvalid) || !errors.Is(err, fence.ErrSyntax) || errors.Is(err, fence.ErrMissing) {
				t.Fatalf("value %q: %v, want ErrMalformed and fence.ErrSyntax", vs[0], err)
			}
			break
		}
		if err != nil {
			t.Fatalf("value %q parses as %v, but: %v", vs[0], want, err)
		}
		if tok != want || tok.String() != vs[0] {
			t.Fatalf("value %q: token %#v, want %#v in canonical form", vs[0], tok, want)
		}
		if verr := tok.Validate(); verr != nil {
			t.Fatalf("value %q: accepted an invalid token: %v", vs[0], verr)
		}
	default:
		if !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("%d values: %v, want ErrMalformed", len(vs), err)
		}
	}
	if err != nil && !tok.IsZero() {
		t.Fatalf("error %v with a non-zero token %#v", err, tok)
	}
}

func FuzzTokenFromHeader(f *testing.F) {
	f.Add("42:orders", "", uint8(1))
	f.Add("42:orders", "43:orders", uint8(2))
	f.Add("", "", uint8(0))
	f.Fuzz(func(t *testing.T, a, b string, n uint8) {
		vs := values(a, b, n)
		h := http.Header{}
		for _, v := range vs {
			h.Add(guard.Header, v)
		}
		tok, err := guard.TokenFromHeader(h)
		checkTokenFrom(t, vs, tok, err)
	})
}
