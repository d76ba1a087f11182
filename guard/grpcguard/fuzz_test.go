package grpcguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/guard/grpcguard"
	"github.com/fencekit/fencekit/internal/testsupport/tokentest"
	"google.golang.org/grpc/metadata"
)

func FuzzTokenFromMetadata(f *testing.F) {
	f.Add("42:orders", "", uint8(1))
	f.Add("7:a%2Fb", "7:a%2Fb", uint8(2))
	f.Add("", "", uint8(0))
	f.Fuzz(func(t *testing.T, a, b string, n uint8) {
		vs := tokentest.Values(a, b, n)
		md := metadata.MD{}
		for _, v := range vs {
			md.Append("Fencing-Token", v) // keys are case-insensitive
		}
		tok, err := grpcguard.TokenFromMetadata(md)
		tokentest.Check(t, vs, tok, err)
	})
}
