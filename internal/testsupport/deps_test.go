package testsupport_test

import (
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const helpers = "github.com/fencekit/fencekit/internal/testsupport/"

// TestTestSupportOnlyInTests: no package but the test helpers themselves
// depends on a test helper, in the core module and in the modules of the
// workspace that may import the core's internal packages.
func TestTestSupportOnlyInTests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	patterns := []string{"github.com/fencekit/fencekit/...", "github.com/fencekit/fencekit/integration/...",
		"github.com/fencekit/fencekit/redisguard/...", "github.com/fencekit/fencekit/objguard/...", "github.com/fencekit/fencekit/k8s/...",
		"github.com/fencekit/fencekit/cmd/fencekit/..."}
	checked, listed := 0, 0
	for _, p := range patterns {
		out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", p).Output()
		if err != nil {
			t.Logf("go list %s: %v (not in this build's workspace)", p, err)
			continue
		}
		before := checked
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, deps, _ := strings.Cut(line, " ")
			if pkg == "" || strings.HasPrefix(pkg, helpers) || strings.Contains(pkg, "...") {
				continue // a helper, or a pattern outside this build (go list -e)
			}
			checked++
			for _, d := range strings.Fields(deps) {
				if strings.HasPrefix(d, helpers) {
					t.Errorf("production package %s depends on test helper %s", pkg, d)
				}
			}
		}
		if checked > before {
			listed++
		}
	}
	// The core module alone (GOWORK=off, as CI's floor and newest runs
	// build it) has about 15 production packages; the workspace, more.
	minimum := 10
	if listed > 1 {
		minimum = 20
	}
	if checked < minimum {
		t.Fatalf("checked %d packages in %d modules: go list found too few", checked, listed)
	}
	t.Logf("%d production packages, none depends on a test helper", checked)
}
