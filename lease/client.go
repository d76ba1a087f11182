package lease

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/lifetime"
	"github.com/fencekit/fencekit/lease/internal/metrics"
	"github.com/fencekit/fencekit/owner"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
)

// MaxNameLen is the longest lock name, in bytes (fence.MaxNameLen).
const MaxNameLen = fence.MaxNameLen

// Client acquires leases on etcd. The records of its leases are attached
// to its etcd session leases, kept alive in the background: one session
// per thousand records held (see the cost model in the package doc) and
// per TTL (WithLeaseTTL), granted by the first Acquire that needs it and
// again after one is lost.
//
// A Client is safe for concurrent use. Close it when done: Close revokes
// its sessions, which ends every lease the Client holds.
//
// Inside, a Client is its configuration, its session lifecycle (sessions)
// and its records table (recs), which owns its watches and every record
// it holds, waits for or cleans up.
type Client struct {
	etcd     *clientv3.Client
	cfg      config
	src      *owner.Source
	log      *slog.Logger
	met      *metrics.Metrics
	tracer   trace.Tracer
	bg       *lifetime.Group // the Client's lifetime and background goroutines; stopped by Close
	lat      latencies       // recent reply times (see resend.Pacer)
	sessions sessionSet      // the sessions, and whether the Client is closed
	recs     *records        // every record the Client knows, and its watches
}

// latencies are a Client's recent reply times, in ns.
type latencies struct {
	change atomic.Int64 // of Release, Reenter and Proclaim (see resend.Pacer)
	renew  atomic.Int64 // of background renewals (see renewalDeadline)
}

// New returns a Client that keeps its records in etcd through cli. New does
// no I/O: the session is granted by the first Acquire. The caller keeps
// ownership of cli and closes it after the Client.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, errors.New("lease: nil etcd client")
	}
	cfg := config{prefix: DefaultPrefix, ttl: DefaultTTL}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("lease: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	fixedMargin := cfg.margin != 0
	if !fixedMargin {
		cfg.margin = max(cfg.ttl/10, 50*time.Millisecond)
	}
	if cfg.margin*2 >= cfg.ttl {
		return nil, fmt.Errorf("lease: safety margin %v is not less than half the TTL %v", cfg.margin, cfg.ttl)
	}
	if cfg.obs.Logger == nil {
		cfg.obs.Logger = slog.New(slog.DiscardHandler)
	}
	src := owner.Default()
	if cfg.instance != "" {
		var err error
		if src, err = owner.NewSource(cfg.instance, owner.ProcessStart()); err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
	}
	met := metrics.New(opRenew.String(), opRelease.String(), opReenter.String(), opProclaim.String(), opTransfer.String())
	if cfg.obs.Registerer != nil {
		if err := met.Register(cfg.obs.Registerer); err != nil {
			return nil, err
		}
	}
	c := &Client{
		met:    met,
		tracer: newTracer(cfg.obs.TracerProvider),
		etcd:   cli,
		cfg:    cfg,
		src:    src,
		log:    cfg.obs.Logger,
		bg:     lifetime.NewGroup(),
		sessions: sessionSet{
			bound:       maxSessionRecords,
			idleAfter:   maxSessionIdle,
			fixedMargin: fixedMargin,
			cur:         map[time.Duration]*session{},
			live:        map[*session]struct{}{},
			checked:     map[string]struct{}{},
		},
	}
	c.recs = newRecords(cli, c.bg, c.log, cfg, c, met)
	met.Headroom.Add(c)
	return c, nil
}

// ValidateName returns nil for a usable lock name, and an error matching
// ErrInvalidName (and fence.ErrInvalidName) otherwise: names are 1 to
// MaxNameLen bytes of UTF-8 with no "/" and no control characters (C0, DEL
// and C1). It is fence.ValidateName, the one rule of the module.
func ValidateName(name string) error {
	var ne *fence.NameError
	if err := fence.ValidateName(name); errors.As(err, &ne) {
		return &nameError{ne}
	} else if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	return nil
}

// nameError is ValidateName's error: it reads with lease's prefix and
// matches ErrInvalidName as well as fence's name errors.
type nameError struct{ ne *fence.NameError }

func (e *nameError) Error() string {
	return fmt.Sprintf("lease: invalid lock name %q: %s", e.ne.Name, e.ne.Reason)
}
func (e *nameError) Is(target error) bool { return target == ErrInvalidName }
func (e *nameError) Unwrap() error        { return e.ne }

// Close ends every lease and wait of the Client and revokes its sessions,
// which deletes every record it holds, bounded by the TTL.
// Leases end with ErrClosed; waiting Acquire calls return ErrClosed. Close
// waits for the Client's goroutines to exit. Later calls return nil.
//
// Close the Client before its etcd client: after the etcd client, Close
// cannot revoke anything and returns ErrEtcdClosed (the records stay until
// their sessions expire).
func (c *Client) Close() error {
	live, ok := c.sessions.close()
	if !ok {
		return nil
	}
	c.met.Headroom.Remove(c)
	c.recs.close()
	if c.etcdClosed() {
		for _, s := range live {
			c.endSession(s, ErrEtcdClosed)
		}
		c.bg.Stop()
		return fmt.Errorf("lease: close: %w", ErrEtcdClosed)
	}
	var errs []error
	for _, s := range live {
		if c.endSession(s, ErrClosed) {
			errs = append(errs, c.revoke(s))
		}
	}
	c.bg.Stop()
	return errors.Join(errs...)
}

// etcdClosed reports whether the etcd client was closed.
func (c *Client) etcdClosed() bool {
	ctx := c.etcd.Ctx()
	return ctx != nil && ctx.Err() != nil
}

// Healthy returns nil while the Client can keep its leases: it is open, its
// etcd client is open, and no session of it has gone half its TTL without
// a confirmed renewal (each is renewed every third of the TTL; one whose
// renewals stay unconfirmed ends at its validity deadline). Use it as a
// readiness or liveness probe next to the work the leases protect (like
// client-go's leader-election health check).
func (c *Client) Healthy() error {
	if c.etcdClosed() {
		return ErrEtcdClosed
	}
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	if c.sessions.closed {
		return ErrClosed
	}
	for s := range c.sessions.live {
		// validUntil is the last confirmed renewal's send time plus the
		// TTL less the margin.
		since := time.Since(s.until().Add(-(s.ttl - s.margin)))
		if since > s.ttl/2 {
			return fmt.Errorf("lease: unhealthy: no renewal confirmed for %v (the TTL is %v)", since.Round(time.Millisecond), s.ttl)
		}
	}
	return nil
}

// Prefix returns the etcd key prefix of c's records (WithPrefix's, with
// its trailing "/", or DefaultPrefix): what NewVerifier and the operator
// tools of package lease/admin take to read the same locks.
func (c *Client) Prefix() string { return c.cfg.prefix }
