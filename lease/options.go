package lease

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencekit/fencekit/internal/observe"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/owner"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// DefaultTTL is the session TTL used when WithTTL is not given.
const DefaultTTL = 10 * time.Second

// DefaultPrefix is the etcd key prefix used when WithPrefix is not given.
const DefaultPrefix = "fencekit/locks/"

// An Option configures a Client. Options are applied and validated by New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	prefix   string
	ttl      time.Duration
	margin   time.Duration
	instance string
	obs      observe.Options // WithLogger, WithMetrics, WithTracerProvider
}

// WithTracerProvider makes the Client record an OpenTelemetry span for
// each acquisition (with its wait and queue position), Renew, Reenter,
// Release and Proclaim, through tp. Spans carry what the logs carry — a
// hash of the lock name, the owner digest, the fencing revision, the
// outcome — and never an owner token. Without it the Client records
// nothing; it never uses the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.TracerProvider, tp, errors.New("lease: nil TracerProvider"))
	})
}

// WithPrefix sets the etcd key prefix under which the Client keeps its lock
// records. A "/" is appended when missing. Clients that must exclude each
// other must use the same prefix; give a least-privilege etcd role exactly
// this prefix.
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) (err error) {
		c.prefix, err = record.Prefix(prefix)
		return err
	})
}

// WithTTL sets the TTL of the Client's etcd session lease. etcd counts TTLs
// in whole seconds, so d is rounded up to a whole second; it must be between
// 1 s and 1 h. A TTL below the server's minimum (1.5 election timeouts,
// 2 s with default server settings), which etcd would silently raise, makes
// Acquire fail with ErrTTLTooShort. The default is DefaultTTL.
//
// The TTL is how long a holder that stops (crashes, pauses, is partitioned)
// keeps others waiting, and bounds how long its critical section may run
// without a confirmed renewal: pick it well above your longest pause and
// round trip, and still rely on fencing for writes.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 || d > time.Hour {
			return fmt.Errorf("lease: TTL %v outside (0, 1h]", d)
		}
		c.ttl = (d + time.Second - 1).Truncate(time.Second)
		return nil
	})
}

// WithSafetyMargin sets how long before the earliest moment the server
// could expire the session a lease's Done channel closes when renewals stop
// being confirmed. It covers clock-rate differences and scheduling delay
// between the deadline and the code that reacts to it. It must be positive
// and less than half the TTL; the default is a tenth of the TTL, at least
// 50 ms.
func WithSafetyMargin(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("lease: safety margin %v is not positive", d)
		}
		c.margin = d
		return nil
	})
}

// WithLogger sets the logger for lifecycle records (acquired, renewed,
// released, lost). Records carry a hash of the lock name, the owner digest
// and the fencing revision, never an owner token. The default discards.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error { return observe.Set(&c.obs.Logger, l, errors.New("lease: nil logger")) })
}

// WithInstanceID sets the instance id that owner tokens of this Client carry
// (see owner.NewSource). The default is owner.DefaultInstance().
func WithInstanceID(id string) Option {
	return optionFunc(func(c *config) error {
		if _, err := owner.NewSource(id, time.Now()); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		c.instance = id
		return nil
	})
}

// WithMetrics registers the Client's Prometheus metrics on reg (nothing is
// registered globally): fencekit_lease_acquisitions_total{outcome},
// fencekit_lease_acquire_wait_seconds, fencekit_lease_hold_seconds,
// fencekit_lease_results_total{op,outcome},
// fencekit_lease_losses_total{cause} and
// fencekit_lease_duplicate_releases_total. Label values are fixed words,
// never lock names or tokens. Clients registering on the same reg share the
// collectors.
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Registerer, reg, errors.New("lease: nil metrics registerer"))
	})
}
