package redisguard_test

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/modtest"

	"github.com/fencekit/fencekit/redisguard"
)

// TestExamples runs the Examples that need Redis and checks what they
// print, as `// Output:` would; it skips without Redis. Their keys are
// deleted before and after, so that reruns start from nothing.
func TestExamples(t *testing.T) {
	cli := redisOrSkip(t)
	ctx := context.Background()
	keys := []string{
		redisguard.DefaultPrefix + "{example-orders}", "{example-orders}:total",
		redisguard.DefaultPrefix + "{example-job-7}", "{example-job-7}:state", "{example-job-7}:log", "{example-job-7}:lease",
		"example-marks:{example-items}",
	}
	clean := func() {
		if err := cli.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	clean()
	t.Cleanup(clean)
	modtest.RunExamples(t,
		modtest.Example{Name: "Example", Run: Example, Want: "A adds 10: 10 <nil>\nB adds 5: 15 <nil>\nA refused: its token 41 is older than the mark 42\ntotal: 15\n"},
		modtest.Example{Name: "ExampleGuard_Exec", Run: ExampleGuard_Exec, Want: "[2 1 <nil>] <nil>\ntrue\ncommand 1 INCRBY failed; log length: 1\n"},
		modtest.Example{Name: "ExampleStore", Run: ExampleStore, Want: "<nil>\ntrue true\n7:items <nil>\n"},
	)
}
