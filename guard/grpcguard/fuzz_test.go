package grpcguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard/grpcguard"
	"github.com/fencekit/fencekit/internal/testsupport/tokentest"
	"google.golang.org/grpc/metadata"
)

func FuzzTokenFromMetadata(f *testing.F) {
	tokentest.Fuzz(f, func(vs []string) (fence.Token, error) {
		md := metadata.MD{}
		for _, v := range vs {
			md.Append("Fencing-Token", v) // keys are case-insensitive
		}
		return grpcguard.TokenFromMetadata(md)
	}, tokentest.Seed{A: "7:a%2Fb", B: "7:a%2Fb", N: 2})
}
