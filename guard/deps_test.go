package guard_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyWhatItUses: a program using only the HTTP middleware
// links neither the etcd client nor gRPC (those are in the etcdstore and
// grpcguard sub-packages).
func TestImportsOnlyWhatItUses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "./testdata/httponly").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if strings.HasPrefix(d, "go.etcd.io/") || d == "google.golang.org/grpc" || strings.HasPrefix(d, "google.golang.org/grpc/") {
			t.Errorf("an HTTP-only guard program depends on %s", d)
		}
	}
	t.Logf("an HTTP-only guard program has %d dependencies", len(deps))
}
