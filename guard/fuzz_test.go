package guard_test

import (
	"net/http"
	"testing"

	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/tokentest"
)

func FuzzTokenFromHeader(f *testing.F) {
	f.Add("42:orders", "", uint8(1))
	f.Add("42:orders", "43:orders", uint8(2))
	f.Add("", "", uint8(0))
	f.Fuzz(func(t *testing.T, a, b string, n uint8) {
		vs := tokentest.Values(a, b, n)
		h := http.Header{}
		for _, v := range vs {
			h.Add(guard.Header, v)
		}
		tok, err := guard.TokenFromHeader(h)
		tokentest.Check(t, vs, tok, err)
	})
}
