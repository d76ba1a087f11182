package objguard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/objguard"
)

// The Examples need an S3 server, so they have no Output comment (go test
// would run them without one): TestExamples starts versitygw, points
// exampleClient at it and checks what they print; it skips when versitygw
// is not built, or fails when FENCEKIT_REQUIRE_S3=1.

// A superseded holder's late write and delete are refused by the store
// itself: each fenced write is conditional on the version it decided
// about.
func Example() {
	ctx := context.Background()
	cli := exampleClient()                      // an *s3.Client: s3.NewFromConfig(cfg)
	g, err := objguard.New(ctx, cli, "reports") // add objguard.WithVerifier(locks.Verifier()) in production
	if err != nil {
		panic(err) // a *objguard.ProbeError when the store ignores conditional writes
	}
	a := fence.Token{Lock: "reports", Revision: 41} // A's lease: a.Fence()
	b := fence.Token{Lock: "reports", Revision: 42} // B's, after A's lease ended

	_, err = g.Put(ctx, "daily.json", a, []byte(`{"by":"A"}`))
	fmt.Println("A writes:", err)

	// A pauses past its TTL; B acquires the lock and writes.
	_, err = g.Put(ctx, "daily.json", b, []byte(`{"by":"B"}`))
	fmt.Println("B writes:", err)

	// A wakes up and writes late: refused, nothing changed.
	_, err = g.Put(ctx, "daily.json", a, []byte(`{"by":"A, late"}`))
	var stale *fence.RefusedError
	if errors.As(err, &stale) {
		fmt.Println("A refused:", stale.Outcome, "token", stale.Token.Revision, "mark", stale.Mark.Revision)
	}
	fmt.Println("A deletes:", errors.Is(g.Delete(ctx, "daily.json", a), fence.ErrStale))
	body, obj, err := g.Get(ctx, "daily.json")
	fmt.Println(string(body), obj.Mark, err)
}

// A multi-object commit: the data objects are written under new, unique
// names (If-None-Match: *, unfenced), then the one manifest that names
// them is switched with a fenced Put. A superseded writer's late commit is
// refused; its data objects stay unnamed, so no reader sees them.
func ExampleGuard_Put_commit() {
	ctx := context.Background()
	cli := exampleClient()
	g, err := objguard.New(ctx, cli, "lake")
	if err != nil {
		panic(err)
	}
	commit := func(tok fence.Token, parts ...string) error {
		var names []string
		for i, part := range parts {
			name := fmt.Sprintf("events/data/%d-%d.json", tok.Revision, i) // unique per writer and part
			if _, err := cli.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lake"), Key: &name,
				Body: strings.NewReader(part), IfNoneMatch: aws.String("*")}); err != nil {
				return err
			}
			names = append(names, name)
		}
		// The manifest's bytes name the token: no two versions share an ETag.
		manifest := "token " + tok.String() + "\n" + strings.Join(names, "\n") + "\n"
		_, err := g.Put(ctx, "events/manifest", tok, []byte(manifest))
		return err
	}
	old := fence.Token{Lock: "events", Revision: 41}
	cur := fence.Token{Lock: "events", Revision: 42}
	fmt.Println("commit by 42:", commit(cur, `{"n":1}`, `{"n":2}`))
	err = commit(old, `{"n":"late"}`)
	fmt.Println("late commit by 41 refused:", errors.Is(err, fence.ErrStale))

	out, err := cli.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("lake"), Key: aws.String("events/manifest")})
	if err != nil {
		panic(err)
	}
	defer out.Body.Close()
	var manifest bytes.Buffer
	if _, err := manifest.ReadFrom(out.Body); err != nil {
		panic(err)
	}
	fmt.Print(manifest.String())
}

// Probe checks a store before trusting it with fenced writes; New runs it
// unless WithoutProbe.
func ExampleProbe() {
	ctx := context.Background()
	err := objguard.Probe(ctx, exampleClient(), "reports", "scratch/fencekit-probe")
	var ignored *objguard.ProbeError
	if errors.As(err, &ignored) {
		fmt.Println("this store cannot fence writes; it ignored:", ignored.Ignored)
		return
	}
	fmt.Println("probe:", err)
}
