package objguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/observe"
	"go.opentelemetry.io/otel/trace"
)

// The object metadata the Guard reads and writes (x-amz-meta-<name> on the
// wire).
const (
	// MetaToken holds the fencing token of the object's last fenced
	// writer, in its text form (fence.Token.String): the object's mark.
	MetaToken = "fencekit-token"
	// MetaDeleted is "1" on a tombstone: the object a fenced Delete
	// leaves in place of the deleted one, which keeps the mark.
	MetaDeleted = "fencekit-deleted"
	// TombstoneContentType is the Content-Type of tombstones.
	TombstoneContentType = "application/x-fencekit-tombstone"
)

// Client is the part of the S3 API that a Guard uses; *s3.Client
// satisfies it. A Guard does not own it.
type Client interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// Option configures a Guard.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	verifier  guard.Verifier
	obs       observe.Options // WithLogger, WithMetrics, WithTracerProvider
	probeKey  string
	noProbe   bool
	cacheSize int
}

// DefaultCacheSize is how many objects' last written versions a Guard
// remembers by default (see WithCacheSize).
const DefaultCacheSize = 4096

// WithVerifier makes the Guard verify tokens with v (lease.Verifier for
// the locks of package lease) before they raise an object's mark: only
// the lock's current holder at the time of the check can then write an
// object whose mark is older or absent. The Guard remembers, per lock,
// the last token it verified, so a holder's writes cost one verification
// per acquisition. A token v does not confirm is refused with a
// *fence.RefusedError of Outcome fence.Unverified; when v cannot tell,
// the write fails and nothing is written (fail closed).
func WithVerifier(v guard.Verifier) Option {
	return optionFunc(func(c *config) error {
		if v == nil {
			return errors.New("objguard: nil verifier")
		}
		c.verifier = v
		return nil
	})
}

// WithProbeKey sets the scratch key New's conformance probe writes and
// deletes (default ".fencekit-probe/" and 16 random hex digits): use it
// when the bucket's policy lets the Guard's credentials write only under
// some prefix.
func WithProbeKey(key string) Option {
	return optionFunc(func(c *config) error {
		if key == "" {
			return errors.New("objguard: empty probe key")
		}
		c.probeKey = key
		return nil
	})
}

// WithoutProbe makes New skip the conformance probe. It is unsafe: on a
// store that ignores If-Match or If-None-Match, every fenced write
// succeeds and a superseded holder overwrites its successor's objects.
// Use it only for a store and configuration that passed Probe before (a
// proxy or gateway in front of the store can strip the headers too).
func WithoutProbe() Option {
	return optionFunc(func(c *config) error {
		c.noProbe = true
		return nil
	})
}

// WithCacheSize sets how many objects' last written versions the Guard
// remembers (default DefaultCacheSize); 0 turns the memory off, so that
// every write reads the object first. When it is full the Guard forgets
// them all.
func WithCacheSize(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 0 {
			return fmt.Errorf("objguard: negative cache size %d", n)
		}
		c.cacheSize = n
		return nil
	})
}

// Guard makes fenced writes to the objects of one bucket: a PUT or DELETE
// is sent only when the caller's fencing token is its lock's and equal to
// or newer than the object's mark, as a conditional request on the
// version it decided about. It is safe for concurrent use.
type Guard struct {
	cli    Client
	bucket string
	ver    guard.Verifier // nil without WithVerifier
	log    *slog.Logger
	met    *metrics     // nil without WithMetrics
	tracer trace.Tracer // nil without WithTracerProvider

	mu       sync.Mutex
	verified map[string]int64   // lock name -> revision last verified
	cache    map[string]version // key -> the version this Guard last wrote
	cacheMax int
}

// version is what the Guard knows of one version of an object.
type version struct {
	exists  bool        // false: no object at the key
	etag    string      // quoted, as the store sends it
	mark    fence.Token // zero when the object has no mark
	deleted bool        // a tombstone
}

// New returns a Guard for bucket, writing through cli, after it ran Probe
// on a scratch key (see WithProbeKey, WithoutProbe): it returns the
// probe's error, a *ProbeError matching ErrConditionsIgnored when the
// store ignores a condition, and no Guard. ctx bounds the probe.
func New(ctx context.Context, cli Client, bucket string, opts ...Option) (*Guard, error) {
	if cli == nil {
		return nil, errors.New("objguard: nil client")
	}
	if bucket == "" {
		return nil, errors.New("objguard: empty bucket name")
	}
	cfg := config{cacheSize: DefaultCacheSize}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("objguard: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.obs.Logger == nil {
		cfg.obs.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Guard{cli: cli, bucket: bucket, ver: cfg.verifier, log: cfg.obs.Logger,
		verified: map[string]int64{}, cache: map[string]version{}, cacheMax: cfg.cacheSize}
	if cfg.obs.TracerProvider != nil {
		g.tracer = cfg.obs.TracerProvider.Tracer(tracerName)
	}
	if cfg.obs.Registerer != nil {
		met, err := newMetrics(cfg.obs.Registerer)
		if err != nil {
			return nil, err
		}
		g.met = met
	}
	if !cfg.noProbe {
		key := cfg.probeKey
		if key == "" {
			key = ".fencekit-probe/" + randomHex(8)
		}
		if err := Probe(ctx, cli, bucket, key); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Bucket returns the bucket the Guard writes to.
func (g *Guard) Bucket() string { return g.bucket }

// Object describes one version of an object, as the Guard read or wrote
// it.
type Object struct {
	// Key is the object's key.
	Key string
	// ETag is the version's entity tag, quoted as the store sends it;
	// empty when there is no object.
	ETag string
	// Mark is the token of the version's fenced writer; zero for an
	// object written outside the Guard, or none.
	Mark fence.Token
	// Exists is false when there is no object at the key.
	Exists bool
	// Deleted marks a tombstone: the object was deleted through the
	// Guard, which keeps its mark in its place.
	Deleted bool
}

func (v version) object(key string) Object {
	return Object{Key: key, ETag: v.etag, Mark: v.mark, Exists: v.exists, Deleted: v.deleted}
}

// Put writes body to key as a fenced write with token t, and returns the
// version written. It is sent only if t is valid and equal to or newer
// than the object's mark (of the same lock), as a PUT conditional on the
// version it decided about (If-Match its ETag, If-None-Match: * when there
// was none), carrying t as the new mark (metadata MetaToken). When another
// write lands in between, the store refuses the PUT (412) and Put reads
// again and decides again, at most MaxAttempts times. A Put over a
// tombstone re-creates the object.
//
// A holder's repeated writes need one request each: the Guard remembers
// the ETag and mark of the version it last wrote to each object and
// writes on it without reading first; a 412 makes it forget them and
// read.
//
// If-Match compares ETags, which S3 computes from the bytes alone: body
// must not repeat the bytes of an earlier version of the object written
// under an older token, or a superseded holder that decided on (or
// remembers) that version can write over the newer one (see the package
// documentation, "ETags name bytes, not versions").
//
// When t is refused nothing is written and Put returns a
// *fence.RefusedError naming the key, the token and the mark: Outcome
// Missing (t is zero), Malformed (t is invalid), Stale (older than the
// mark), WrongLock (the mark is another lock's) or Unverified (see
// WithVerifier). Other errors: ErrBadMark, ErrContended, the verifier's,
// ctx's, or the store's; a store error after sending (a lost reply)
// leaves the outcome unknown.
func (g *Guard) Put(ctx context.Context, key string, t fence.Token, body []byte) (Object, error) {
	return g.run(ctx, opPut, key, t, body)
}

// Delete deletes key as a fenced write with token t: it replaces the
// object (or the absence of one) by a tombstone, a small object of
// Content-Type TombstoneContentType with metadata MetaDeleted "1" and t as
// its mark, written under the same conditions as Put. The tombstone keeps
// the mark, so a superseded holder's later Put, which would re-create the
// object, is refused as stale. Get reports a tombstone as ErrNotFound;
// plain S3 readers see a small object whose metadata says it is one.
// Deleting a tombstone of t again sends nothing more. Errors are Put's.
func (g *Guard) Delete(ctx context.Context, key string, t fence.Token) error {
	_, err := g.run(ctx, opDelete, key, t, nil)
	return err
}

// Purge removes key from the store as a fenced write with token t: a
// DELETE conditional on the ETag of the version it decided about (If-Match),
// sent only if t is equal to or newer than the object's mark; a 412 reads
// again. Unlike Delete it removes the mark with the object, so anyone may
// create the key again afterwards, a superseded holder included: use it
// for keys that no lock protects any longer. Purging a missing key sends
// nothing more. Errors are Put's.
func (g *Guard) Purge(ctx context.Context, key string, t fence.Token) error {
	_, err := g.run(ctx, opPurge, key, t, nil)
	return err
}

// Head reads the object's current version: its ETag, mark and whether it
// is a tombstone. A missing object is not an error: Exists is false.
func (g *Guard) Head(ctx context.Context, key string) (Object, error) {
	v, err := g.head(ctx, key)
	return v.object(key), err
}

// Get reads the object's bytes and version. It returns an error matching
// ErrNotFound for a missing object or a tombstone. It is a plain read:
// fencing guards writes, and any reader may read.
func (g *Guard) Get(ctx context.Context, key string) ([]byte, Object, error) {
	out, err := g.cli.GetObject(ctx, &s3.GetObjectInput{Bucket: &g.bucket, Key: &key})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, Object{Key: key}, fmt.Errorf("%w: %q", ErrNotFound, key)
		}
		return nil, Object{Key: key}, fmt.Errorf("objguard: get %q: %w", key, err)
	}
	defer out.Body.Close()
	v, err := versionOf(key, out.ETag, out.Metadata)
	if err != nil {
		return nil, Object{Key: key}, err
	}
	if v.deleted {
		return nil, v.object(key), fmt.Errorf("%w: %q is a tombstone", ErrNotFound, key)
	}
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, v.object(key), fmt.Errorf("objguard: get %q: %w", key, err)
	}
	return b, v.object(key), nil
}

// head reads the object's current version.
func (g *Guard) head(ctx context.Context, key string) (version, error) {
	out, err := g.cli.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &g.bucket, Key: &key})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return version{}, nil
		}
		return version{}, fmt.Errorf("objguard: head %q: %w", key, err)
	}
	return versionOf(key, out.ETag, out.Metadata)
}

// versionOf builds a version from a response's ETag and metadata.
func versionOf(key string, etag *string, meta map[string]string) (version, error) {
	v := version{exists: true, etag: aws.ToString(etag), deleted: meta[MetaDeleted] == "1"}
	if s, ok := meta[MetaToken]; ok {
		m, err := fence.Parse(s)
		if err != nil {
			return version{}, fmt.Errorf("%w: %q: %w", ErrBadMark, key, err)
		}
		v.mark = m
	}
	return v, nil
}

// statusOf returns the HTTP status of a store's error response, or 0.
func statusOf(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// conflict reports a conditional request that the store refused because
// the object is not (or no longer) the version it was conditional on: 412
// Precondition Failed; 409 ConditionalRequestConflict, which S3 answers
// to a conditional write racing another; 404 for an If-Match on an object
// that is gone (but not a missing bucket).
func conflict(err error) bool {
	var ae interface{ ErrorCode() string }
	if errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket" {
		return false
	}
	switch statusOf(err) {
	case http.StatusPreconditionFailed, http.StatusConflict, http.StatusNotFound:
		return true
	}
	return false
}

// cached returns the version this Guard last wrote to key, if it
// remembers it.
func (g *Guard) cached(key string) (version, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.cache[key]
	return v, ok
}

// remember records v as the version this Guard wrote to key.
func (g *Guard) remember(key string, v version) {
	if g.cacheMax == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.cache[key]; !ok && len(g.cache) >= g.cacheMax {
		clear(g.cache)
	}
	g.cache[key] = v
}

// forget drops what the Guard remembers of key.
func (g *Guard) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.cache, key)
}

// run decides and sends one fenced write, observing the decision.
func (g *Guard) run(ctx context.Context, op, key string, t fence.Token, body []byte) (Object, error) {
	sctx, span := g.startSpan(ctx, op, key, t)
	v, ev := g.decide(sctx, op, key, t, body)
	ev.op = op
	g.observe(sctx, ev)
	endSpan(span, ev)
	return v.object(key), ev.err
}

// decide checks t, then reads, decides and writes conditionally until the
// store accepts the write or t is refused, at most MaxAttempts times.
func (g *Guard) decide(ctx context.Context, op, key string, t fence.Token, body []byte) (version, event) {
	ev := event{key: key, lock: t.Lock, token: t}
	if err := g.checkInput(key, t); err != nil {
		ev.setErr(err)
		return version{}, ev
	}
	cur, fromCache := g.cached(key)
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		ev.attempts = attempt
		if !fromCache {
			var err error
			if cur, err = g.head(ctx, key); err != nil {
				ev.setErr(err)
				return version{}, ev
			}
		}
		ev.mark = cur.mark
		if err := fence.Check(cur.mark, t); err != nil {
			if fromCache { // a remembered version is never a reason to refuse: read
				g.forget(key)
				fromCache = false
				continue
			}
			ev.setErr(refused(key, err))
			return version{}, ev
		}
		if err := g.verifyRaise(ctx, key, t, cur.mark); err != nil {
			ev.setErr(err)
			return version{}, ev
		}
		next, done, err := g.send(ctx, op, key, t, body, cur, fromCache)
		switch {
		case err == nil:
			ev.outcome, ev.mark = outAccepted, t
			return next, ev
		case done:
			g.forget(key)
			ev.setErr(err)
			return version{}, ev
		}
		// The object is not the version decided about: read again.
		g.forget(key)
		fromCache = false
		if g.met != nil {
			g.met.conflicts.WithLabelValues(op).Inc()
		}
	}
	ev.setErr(fmt.Errorf("%w: %q, %d attempts", ErrContended, key, MaxAttempts))
	return version{}, ev
}

// checkInput refuses a bad key or token before anything is sent.
func (g *Guard) checkInput(key string, t fence.Token) error {
	if key == "" {
		return errors.New("objguard: empty key")
	}
	if t.IsZero() {
		return &fence.RefusedError{Outcome: fence.Missing, Resource: key}
	}
	if err := t.Validate(); err != nil {
		return &fence.RefusedError{Outcome: fence.Malformed, Resource: key, Token: t, Err: err}
	}
	return nil
}

// refused sets the key on fence.Check's refusal.
func refused(key string, err error) error {
	var r *fence.RefusedError
	if errors.As(err, &r) {
		r.Resource = key
		return r
	}
	return err
}

// verifyRaise verifies t when it would raise mark and the Guard has a
// verifier that has not confirmed t before.
func (g *Guard) verifyRaise(ctx context.Context, key string, t, mark fence.Token) error {
	if g.ver == nil || (!mark.IsZero() && t.Revision <= mark.Revision) {
		return nil
	}
	g.mu.Lock()
	known := g.verified[t.Lock] == t.Revision
	g.mu.Unlock()
	if known {
		return nil
	}
	if err := g.ver.Verify(ctx, t); err != nil {
		if errors.Is(err, fence.ErrUnverified) {
			return &fence.RefusedError{Outcome: fence.Unverified, Resource: key, Lock: t.Lock, Token: t, Mark: mark, Err: err}
		}
		return fmt.Errorf("objguard: verify token for %q: %w", key, err)
	}
	g.mu.Lock()
	if g.verified[t.Lock] < t.Revision {
		g.verified[t.Lock] = t.Revision
	}
	g.mu.Unlock()
	return nil
}

// send sends op's conditional request on cur. It returns the version
// written, or done with the error that ends the write, or (not done) an
// error saying that the object is not cur: read again.
func (g *Guard) send(ctx context.Context, op, key string, t fence.Token, body []byte, cur version, fromCache bool) (version, bool, error) {
	switch {
	case op == opPurge && !cur.exists:
		return cur, true, nil
	case op == opPurge:
		_, err := g.cli.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &g.bucket, Key: &key, IfMatch: aws.String(cur.etag)})
		if err != nil {
			return version{}, !conflict(err), fmt.Errorf("objguard: delete %q: %w", key, err)
		}
		g.forget(key)
		return version{mark: t}, true, nil
	case op == opDelete && !fromCache && cur.deleted && cur.mark == t:
		return cur, true, nil // read just now: a tombstone of t already
	}
	in := &s3.PutObjectInput{Bucket: &g.bucket, Key: &key, Metadata: map[string]string{MetaToken: t.String()}}
	if op == opDelete {
		body = tombstone(t)
		in.Metadata[MetaDeleted] = "1"
		in.ContentType = aws.String(TombstoneContentType)
	}
	in.Body, in.ContentLength = bytes.NewReader(body), aws.Int64(int64(len(body)))
	if cur.exists {
		in.IfMatch = aws.String(cur.etag)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := g.cli.PutObject(ctx, in)
	if err != nil {
		return version{}, !conflict(err), fmt.Errorf("objguard: put %q: %w", key, err)
	}
	next := version{exists: true, etag: aws.ToString(out.ETag), mark: t, deleted: op == opDelete}
	if next.etag != "" {
		g.remember(key, next)
	}
	return next, true, nil
}

// tombstone returns the bytes of a tombstone of t. They differ for every
// tombstone (a random nonce), so that no two tombstones have the same
// ETag: see the package documentation, "ETags name bytes".
func tombstone(t fence.Token) []byte {
	return []byte("fencekit tombstone\ntoken " + t.String() + "\nnonce " + randomHex(12) + "\n")
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
