package objguard_test

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/modtest"

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
	modtest.RunExamples(t,
		modtest.Example{Name: "Example", Run: Example, Want: "A writes: <nil>\nB writes: <nil>\nA refused: stale token 41 mark 42\nA deletes: true\n{\"by\":\"B\"} 42:reports <nil>\n"},
		modtest.Example{Name: "ExampleGuard_Put_commit", Run: ExampleGuard_Put_commit, Want: "commit by 42: <nil>\nlate commit by 41 refused: true\ntoken 42:events\nevents/data/42-0.json\nevents/data/42-1.json\n"},
		modtest.Example{Name: "ExampleProbe", Run: ExampleProbe, Want: "probe: <nil>\n"},
	)
}
