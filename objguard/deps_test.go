package objguard_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsOnlyWhatItUses pins what package objguard links: the S3
// client, and of fencekit guard and fence; never the etcd client, gRPC or
// package lease (tokens are verified through guard.Verifier, which the
// program provides). And the core module does not require the AWS SDK:
// only this module does.
func TestImportsOnlyWhatItUses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if strings.HasPrefix(d, "go.etcd.io/") || d == "google.golang.org/grpc" || strings.HasPrefix(d, "google.golang.org/grpc/") ||
			d == "github.com/fencekit/fencekit/lease" || strings.HasPrefix(d, "github.com/fencekit/fencekit/internal/s3proc") {
			t.Errorf("package objguard depends on %s", d)
		}
	}
	for _, want := range []string{"github.com/aws/aws-sdk-go-v2/service/s3", "github.com/fencekit/fencekit/guard", "github.com/fencekit/fencekit/fence"} {
		if !slices.Contains(deps, want) {
			t.Errorf("package objguard does not depend on %s", want)
		}
	}
	t.Logf("package objguard has %d dependencies", len(deps))
	core, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(core), "aws-sdk-go") || strings.Contains(string(core), "smithy-go") {
		t.Error("the core module's go.mod requires the AWS SDK: only module objguard may")
	}
}
