package shard

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/lease"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultPrefix is the etcd prefix of groups' membership and assignment
// keys when WithPrefix is not given. Shard locks live under the
// lease.Client's own prefix.
const DefaultPrefix = "/fencekit/shards/"

// MaxShards is the largest number of shards in a group: the assignment
// is one etcd value, and 65,536 shards keep it well under etcd's default
// request size of 1.5 MiB.
const MaxShards = 1 << 16

// MaxWeight is the largest member weight.
const MaxWeight = 1000

// Shards names a group's shards: Count(n) or Named(...). Every member of a
// group must give the same.
type Shards struct {
	names   []string
	counted bool
	err     error
}

// Count returns n shards named "0" to "n-1" (1 ≤ n ≤ MaxShards).
func Count(n int) Shards {
	if n < 1 || n > MaxShards {
		return Shards{err: fmt.Errorf("%w: shard count %d outside [1, %d]", ErrInvalidConfig, n, MaxShards)}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	return Shards{names: names, counted: true}
}

// Named returns the shards with the given names (tenants, partitions,
// namespaces): distinct, non-empty, without "/" or control characters,
// and at most MaxShards of them. Their order is part of the group's
// identity.
func Named(names ...string) Shards {
	if len(names) < 1 || len(names) > MaxShards {
		return Shards{err: fmt.Errorf("%w: %d shard names, want 1 to %d", ErrInvalidConfig, len(names), MaxShards)}
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if err := lease.ValidateName(n); err != nil {
			return Shards{err: fmt.Errorf("%w: shard %w", ErrInvalidConfig, err)}
		}
		if seen[n] {
			return Shards{err: fmt.Errorf("%w: shard %q named twice", ErrInvalidConfig, n)}
		}
		seen[n] = true
	}
	return Shards{names: append([]string(nil), names...)}
}

// Option configures a Group.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	prefix  string
	ttl     time.Duration
	settle  time.Duration
	handoff time.Duration
	log     *slog.Logger
	reg     prometheus.Registerer
}

func defaultConfig() config {
	return config{
		prefix:  DefaultPrefix,
		ttl:     lease.DefaultTTL,
		settle:  100 * time.Millisecond,
		handoff: 5 * time.Second,
		log:     slog.New(slog.DiscardHandler),
	}
}

// WithPrefix sets the etcd prefix of the group's membership and
// assignment keys (default DefaultPrefix). It must end in "/".
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) error {
		if p == "" || p[len(p)-1] != '/' {
			return fmt.Errorf("%w: prefix %q does not end in /", ErrInvalidConfig, p)
		}
		c.prefix = p
		return nil
	})
}

// WithTTL sets the TTL of a member's registration: a member that stops
// renewing it (crash, pause, partition) leaves the membership that long
// after its last renewal, and the leader reassigns its shards. Give the
// lease.Client's TTL (lease.WithTTL; default lease.DefaultTTL): its
// shards' locks are freed when its session expires, one TTL after its
// last renewal too. etcd counts whole seconds; d rounds up, 2 s to 1 h.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 2*time.Second || d > time.Hour {
			return fmt.Errorf("%w: TTL %v outside [2s, 1h]", ErrInvalidConfig, d)
		}
		c.ttl = d
		return nil
	})
}

// WithSettle sets how long the leader waits for membership to stop
// changing before it writes a new assignment (default 100 ms): joins or
// deaths that fall within one settle time move every shard at most once.
// The leader writes at the latest 10 settle times after the first change.
// Between 0 (write at once) and 10 s.
func WithSettle(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 || d > 10*time.Second {
			return fmt.Errorf("%w: settle %v outside [0, 10s]", ErrInvalidConfig, d)
		}
		c.settle = d
		return nil
	})
}

// WithHandoff sets how long an owner keeps a shard that the assignment
// moved away while its successor has not asked for it (default 5 s): the
// successor normally asks within milliseconds, from its place in the
// lock's queue, and the owner then releases at once (see the package
// doc); this bounds the wait for a successor that does not come. Between
// 0 and 1 h.
func WithHandoff(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 || d > time.Hour {
			return fmt.Errorf("%w: handoff %v outside [0, 1h]", ErrInvalidConfig, d)
		}
		c.handoff = d
		return nil
	})
}

// WithLogger sets the logger (default: none). Logs name groups, members
// and shards; they never carry owner tokens.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidConfig)
		}
		c.log = l
		return nil
	})
}

// WithMetrics registers the group's Prometheus collectors on reg (see
// the package doc's Metrics). Groups registering on the same reg share
// them.
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		if reg == nil {
			return errors.Join(ErrInvalidConfig, errors.New("shard: nil metrics registerer"))
		}
		c.reg = reg
		return nil
	})
}
