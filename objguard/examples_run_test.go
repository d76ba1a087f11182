package objguard_test

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// exampleS3 is the client the Examples use; TestExamples sets it.
var exampleS3 *s3.Client

func exampleClient() *s3.Client { return exampleS3 }

// TestExamples runs the Examples against a versitygw of its own, with the
// buckets they use, and checks what they print, as `// Output:` would.
func TestExamples(t *testing.T) {
	s := startStore(t)
	ctx := context.Background()
	for _, b := range []string{"reports", "lake"} {
		if _, err := s.cli.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b}); err != nil {
			t.Fatal(err)
		}
	}
	exampleS3 = s.cli
	defer func() { exampleS3 = nil }()
	for _, c := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, "A writes: <nil>\nB writes: <nil>\nA refused: stale token 41 mark 42\nA deletes: true\n{\"by\":\"B\"} 42:reports <nil>\n"},
		{"ExampleGuard_Put_commit", ExampleGuard_Put_commit, "commit by 42: <nil>\nlate commit by 41 refused: true\ntoken 42:events\nevents/data/42-0.json\nevents/data/42-1.json\n"},
		{"ExampleProbe", ExampleProbe, "probe: <nil>\n"},
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
