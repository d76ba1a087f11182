package redisguard_test

import (
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/modtest"
)

// TestImportsOnlyWhatItUses pins what package redisguard links: go-redis,
// and of fencekit guard and fence; never the etcd client, gRPC or package
// lease (tokens are verified through guard.Verifier, which the program
// provides). And the core module does not require go-redis: only this
// module does.
func TestImportsOnlyWhatItUses(t *testing.T) {
	modtest.Deps(t, "redisguard", func(d string) bool {
		return strings.HasPrefix(d, "go.etcd.io/") || d == "google.golang.org/grpc" || strings.HasPrefix(d, "google.golang.org/grpc/") ||
			d == "github.com/fencekit/fencekit/lease" || strings.HasPrefix(d, "github.com/fencekit/fencekit/sqlguard")
	}, "github.com/redis/go-redis/v9", "github.com/fencekit/fencekit/guard", "github.com/fencekit/fencekit/fence")
	modtest.CoreModLacks(t, "go-redis: only module redisguard may", "redis/go-redis")
}
