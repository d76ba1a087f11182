package guard_test

import (
	"net/http"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/tokentest"
)

func FuzzTokenFromHeader(f *testing.F) {
	tokentest.Fuzz(f, func(vs []string) (fence.Token, error) {
		h := http.Header{}
		for _, v := range vs {
			h.Add(guard.Header, v)
		}
		return guard.TokenFromHeader(h)
	}, tokentest.Seed{A: "42:orders", B: "43:orders", N: 2})
}
