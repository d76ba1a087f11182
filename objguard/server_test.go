package objguard_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencekit/fencekit/internal/s3proc"
	"github.com/fencekit/fencekit/objguard"
)

// store is a versitygw server of a test's own and a client of it, with
// one bucket.
type store struct {
	srv    *s3proc.Server
	cli    *s3.Client
	bucket string
}

// startStore starts versitygw (built by s3proc.BuildCommand) in a
// temporary directory on a free loopback port, creates a bucket, and stops
// the server by its PID when t ends. Without a built binary it skips t, or
// fails it when FENCEKIT_REQUIRE_S3 is "1".
func startStore(t testing.TB) *store {
	t.Helper()
	bin, err := s3proc.Built()
	if err != nil {
		if errors.Is(err, s3proc.ErrNotBuilt) && os.Getenv(s3proc.EnvRequire) != "1" {
			t.Skipf("versitygw: %v", err)
		}
		t.Fatalf("versitygw: %v (%s=%s)", err, s3proc.EnvRequire, os.Getenv(s3proc.EnvRequire))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := s3proc.Start(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	s := &store{srv: srv, cli: newClient(t, srv.Endpoint), bucket: "fencekit-test"}
	if _, err := s.cli.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.bucket}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return s
}

// newClient returns an S3 client of the server at endpoint, with the test
// credentials, path-style addressing and a transport of its own whose
// idle connections are closed when t ends.
func newClient(t testing.TB, endpoint string, opts ...func(*s3.Options)) *s3.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	hc := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	o := s3.Options{
		Region:       s3proc.Region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		HTTPClient:   hc,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s3proc.AccessKey, SecretAccessKey: s3proc.SecretKey}, nil
		}),
	}
	for _, f := range opts {
		f(&o)
	}
	return s3.New(o)
}

// newGuard returns a Guard of the store's bucket, failing t on error.
func (s *store) newGuard(t testing.TB, opts ...objguard.Option) *objguard.Guard {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := objguard.New(ctx, s.cli, s.bucket, opts...)
	if err != nil {
		t.Fatalf("objguard.New: %v", err)
	}
	return g
}

// read returns the object's bytes, or "" when it does not exist.
func (s *store) read(t testing.TB, key string) string {
	t.Helper()
	out, err := s.cli.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		var nk interface{ ErrorCode() string }
		if errors.As(err, &nk) && nk.ErrorCode() == "NoSuchKey" {
			return ""
		}
		t.Fatalf("get %q: %v", key, err)
	}
	defer out.Body.Close()
	b := make([]byte, 0, 64)
	buf := make([]byte, 4096)
	for {
		n, err := out.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return string(b)
}
