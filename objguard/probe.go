package objguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The conditions Probe checks, as ProbeError names them.
const (
	ignoredPutIfMatch     = "If-Match on PUT"
	ignoredPutIfNoneMatch = "If-None-Match: * on PUT"
	ignoredDeleteIfMatch  = "If-Match on DELETE"
)

// wrongETag is an ETag no object has (an MD5 digest of nothing in
// particular, as S3 ETags look).
const wrongETag = `"00000000000000000000000000000000"`

// Probe checks that the store behind cli refuses, on bucket, the
// conditional requests a Guard relies on, against the scratch key key,
// which must not exist: it creates key (If-None-Match: *), then sends a
// PUT with If-None-Match: * on the existing key, a PUT with a wrong
// If-Match and a DELETE with a wrong If-Match; each must be refused, and
// must change nothing (the key's ETag is read after each). It then checks
// that a PUT and a DELETE with the right If-Match succeed, and leaves no
// object behind (a plain DELETE cleans up after a failure). That is nine
// requests on a conforming store.
//
// It returns nil for a conforming store; a *ProbeError (matching
// ErrConditionsIgnored) naming each condition the store ignored; and
// another error when the store failed, refused a request that should
// succeed, or ctx ended. New runs it unless WithoutProbe.
func Probe(ctx context.Context, cli Client, bucket, key string) (err error) {
	if cli == nil || bucket == "" || key == "" {
		return errors.New("objguard: probe: nil client, empty bucket or empty key")
	}
	p := prober{cli: cli, bucket: bucket, key: key}
	defer func() {
		if cerr := p.cleanup(ctx); err == nil {
			err = cerr
		}
	}()
	if err := p.put(ctx, nil, aws.String("*")); err != nil {
		return fmt.Errorf("objguard: probe: create %q with If-None-Match: *: %w", key, err)
	}
	checks := []struct {
		name string
		send func() error
	}{
		{ignoredPutIfNoneMatch, func() error { return p.put(ctx, nil, aws.String("*")) }},
		{ignoredPutIfMatch, func() error { return p.put(ctx, aws.String(wrongETag), nil) }},
		{ignoredDeleteIfMatch, func() error { return p.del(ctx, aws.String(wrongETag)) }},
	}
	var ignored []string
	for _, c := range checks {
		ok, err := p.refuses(ctx, c.send)
		if err != nil {
			return fmt.Errorf("objguard: probe: %s: %w", c.name, err)
		}
		if !ok {
			ignored = append(ignored, c.name)
		}
	}
	if len(ignored) > 0 {
		return &ProbeError{Ignored: ignored}
	}
	if err := p.put(ctx, aws.String(p.etag), nil); err != nil {
		return fmt.Errorf("objguard: probe: PUT with the current ETag as If-Match: %w", err)
	}
	if err := p.del(ctx, aws.String(p.etag)); err != nil {
		return fmt.Errorf("objguard: probe: DELETE with the current ETag as If-Match: %w", err)
	}
	return nil
}

// prober sends the probe's requests, tracking the key's ETag.
type prober struct {
	cli         Client
	bucket, key string
	etag        string // the key's current ETag; "" when it is gone
	n           int    // PUTs sent, to give each its own bytes
}

// put sends a PUT with the given conditions and new bytes.
func (p *prober) put(ctx context.Context, ifMatch, ifNoneMatch *string) error {
	p.n++
	body := []byte(fmt.Sprintf("fencekit conformance probe %d %s\n", p.n, randomHex(8)))
	out, err := p.cli.PutObject(ctx, &s3.PutObjectInput{Bucket: &p.bucket, Key: &p.key,
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
	if err == nil {
		p.etag = aws.ToString(out.ETag)
	}
	return err
}

// del sends a DELETE with the given If-Match.
func (p *prober) del(ctx context.Context, ifMatch *string) error {
	_, err := p.cli.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &p.bucket, Key: &p.key, IfMatch: ifMatch})
	if err == nil {
		p.etag = ""
	}
	return err
}

// refuses sends a request that must be refused and reports whether it was
// refused and changed nothing. A conflict answer (412, or 409) is a
// refusal; so is 501 Not Implemented, which fails the Guard's writes
// instead of applying them. Other errors are returned.
func (p *prober) refuses(ctx context.Context, send func() error) (bool, error) {
	before := p.etag
	err := send()
	switch s := statusOf(err); {
	case err == nil:
		return false, p.reread(ctx)
	case s == http.StatusPreconditionFailed || s == http.StatusConflict || s == http.StatusNotImplemented:
	default:
		return false, err
	}
	if err := p.reread(ctx); err != nil {
		return false, err
	}
	return p.etag == before, nil // a refusal that wrote anyway is ignoring
}

// reread reads the key's current ETag.
func (p *prober) reread(ctx context.Context) error {
	out, err := p.cli.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &p.bucket, Key: &p.key})
	if statusOf(err) == http.StatusNotFound {
		p.etag = ""
		return nil
	}
	if err != nil {
		return err
	}
	p.etag = aws.ToString(out.ETag)
	return nil
}

// cleanup deletes the key unconditionally when the probe left it.
func (p *prober) cleanup(ctx context.Context) error {
	if p.etag == "" {
		return nil
	}
	if err := p.del(ctx, nil); err != nil {
		return fmt.Errorf("objguard: probe: remove %q: %w", p.key, err)
	}
	return nil
}
