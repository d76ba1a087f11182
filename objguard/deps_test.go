package objguard_test

import (
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/modtest"
)

// TestImportsOnlyWhatItUses pins what package objguard links: the S3
// client, and of fencekit guard and fence; never the etcd client, gRPC or
// package lease (tokens are verified through guard.Verifier, which the
// program provides). And the core module does not require the AWS SDK:
// only this module does.
func TestImportsOnlyWhatItUses(t *testing.T) {
	modtest.Deps(t, "objguard", func(d string) bool {
		return strings.HasPrefix(d, "go.etcd.io/") || d == "google.golang.org/grpc" || strings.HasPrefix(d, "google.golang.org/grpc/") ||
			d == "github.com/fencekit/fencekit/lease" || strings.HasPrefix(d, "github.com/fencekit/fencekit/internal/s3proc")
	}, "github.com/aws/aws-sdk-go-v2/service/s3", "github.com/fencekit/fencekit/guard", "github.com/fencekit/fencekit/fence")
	modtest.CoreModLacks(t, "the AWS SDK: only module objguard may", "aws-sdk-go", "smithy-go")
}
