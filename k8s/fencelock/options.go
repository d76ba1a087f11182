package fencelock

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fencekit/fencekit/lease"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// An Option configures a Lock. Options are applied and validated by New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	ttl, margin, window time.Duration
	prefix              string
	leaseOpts           []lease.Option
	log                 *slog.Logger
	rec                 resourcelock.EventRecorder
	subject             runtime.Object
}

// WithTTL sets the TTL of the Lock's etcd session, rounded up to a whole
// second as lease.WithTTL does; the default is lease.DefaultTTL (10 s).
// A leader that stops (crashes, pauses, is cut off) keeps the others
// waiting for at most the TTL. The elector's durations are checked
// against it (see the package doc).
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 || d > time.Hour {
			return fmt.Errorf("fencelock: TTL %v outside (0, 1h]", d)
		}
		c.ttl = (d + time.Second - 1).Truncate(time.Second)
		return nil
	})
}

// WithSafetyMargin sets how long before etcd could expire the session a
// leader stops when its renewals are not confirmed (lease.WithSafetyMargin).
// The default is a tenth of the TTL, at least 50 ms; it must be less than
// a quarter of the TTL, so that the elector has time to renew.
func WithSafetyMargin(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("fencelock: safety margin %v is not positive", d)
		}
		c.margin = d
		return nil
	})
}

// WithPrefix sets the etcd key prefix of the Lock's records (lease.WithPrefix);
// the default is lease.DefaultPrefix. A "/" is appended when missing.
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if prefix == "" || prefix == "/" {
			return errors.New("fencelock: empty key prefix")
		}
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		c.prefix = prefix
		return nil
	})
}

// WithLeaseOptions passes options to the lease.Client the Lock creates
// (a logger, metrics, tracing, an instance id). The Lock's own TTL, safety
// margin and prefix take precedence over any given here.
func WithLeaseOptions(opts ...lease.Option) Option {
	return optionFunc(func(c *config) error {
		c.leaseOpts = append(c.leaseOpts, opts...)
		return nil
	})
}

// WithLogger sets the logger for the Lock's records (leadership begun and
// ended, resign failures) and for RecordEvent. The default discards.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("fencelock: nil logger")
		}
		c.log = l
		return nil
	})
}

// WithEventRecorder makes RecordEvent also emit a Kubernetes event of type
// Normal and reason "LeaderElection" about subject (the Pod, Deployment or
// Lease object that stands for the elected component; the Lock has no
// object of its own), as client-go's locks do.
func WithEventRecorder(rec resourcelock.EventRecorder, subject runtime.Object) Option {
	return optionFunc(func(c *config) error {
		if rec == nil || subject == nil {
			return errors.New("fencelock: nil event recorder or subject")
		}
		c.rec, c.subject = rec, subject
		return nil
	})
}

// WithHealthWindow sets how long before the end of the term's validity, as
// last confirmed, Check starts failing. The default is twice the safety
// margin. It must be positive and less than the TTL.
func WithHealthWindow(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("fencelock: health window %v is not positive", d)
		}
		c.window = d
		return nil
	})
}
