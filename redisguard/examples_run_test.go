package redisguard_test

import (
	"context"
	"io"
	"os"
	"testing"

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
	for _, c := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, "A adds 10: 10 <nil>\nB adds 5: 15 <nil>\nA refused: its token 41 is older than the mark 42\ntotal: 15\n"},
		{"ExampleGuard_Exec", ExampleGuard_Exec, "[2 1 <nil>] <nil>\ntrue\ncommand 1 INCRBY failed; log length: 1\n"},
		{"ExampleStore", ExampleStore, "<nil>\ntrue true\n7:items <nil>\n"},
	} {
		if got := stdout(t, c.run); got != c.want {
			t.Errorf("%s printed\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}

// stdout returns what f prints to os.Stdout.
func stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = orig }()
	f()
	w.Close()
	return <-done
}
