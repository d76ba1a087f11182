package etcdtest

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"

	"go.uber.org/zap"
)

var (
	// ErrInvalidConfig reports a Config, or an Option, that cannot
	// describe a cluster. Errors of StartCluster and Start that match it
	// are *ConfigError values naming the field.
	ErrInvalidConfig = errors.New("etcdtest: invalid config")
	// ErrClosed reports a call on a Cluster that was closed. It is the
	// error of the cluster type etcdtest shares with fencekit's process
	// runner (its text names that: "etcdproc: cluster closed").
	ErrClosed = etcdproc.ErrClosed
	// ErrNoProxies reports a client asked to go through no proxy.
	ErrNoProxies = errors.New("etcdtest: no proxies given")
)

// ConfigError reports one invalid Config field (or the Option that sets
// it). It matches ErrInvalidConfig.
type ConfigError struct {
	// Field is the Config field, for example "Members".
	Field string
	// Reason says what is wrong with its value.
	Reason string
}

// Error returns "etcdtest: invalid config: <Field>: <Reason>".
func (e *ConfigError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalidConfig, e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Limits and defaults of a Config.
const (
	// MaxMembers is the largest member count a Config may ask for.
	MaxMembers = etcdproc.MaxMembers
	// DefaultTickInterval is the raft heartbeat interval when
	// Config.TickInterval is 0.
	DefaultTickInterval = etcdproc.DefaultTickInterval
	// DefaultElectionTimeout is the raft election timeout when
	// Config.ElectionTimeout is 0. With it etcd grants leases of 1 second,
	// its smallest TTL.
	DefaultElectionTimeout = etcdproc.DefaultElectionTimeout
	// RootUser is the user that Config.RootPassword creates.
	RootUser = etcdproc.RootUser
)

// Config describes a cluster for StartCluster. The zero value is a valid
// one-member cluster on loopback TCP with fsync on, no TLS, no auth and no
// logs, in a new temporary directory.
type Config struct {
	// Dir is the parent of every member's data directory. Empty means a
	// new temporary directory, removed by Cluster.Close. A Dir given here
	// is left in place.
	Dir string
	// Members is the number of members, 1 to MaxMembers; 0 means 1.
	Members int
	// TickInterval is the raft heartbeat interval, a whole number of
	// milliseconds; 0 means DefaultTickInterval.
	TickInterval time.Duration
	// ElectionTimeout is the raft election timeout, a whole number of
	// milliseconds and at least 5 ticks; 0 means DefaultElectionTimeout.
	// etcd's smallest lease TTL is about 1.5 election timeouts, rounded up
	// to whole seconds.
	ElectionTimeout time.Duration
	// NoFsync turns fsync off: faster, and unsafe against machine crashes
	// (a stopped member keeps its data either way).
	NoFsync bool
	// UnixSockets serves clients on unix sockets (in a short temporary
	// directory) instead of loopback TCP ports. Peers always talk over
	// loopback TCP.
	UnixSockets bool
	// TLS serves clients and peers over TLS with certificates generated
	// for the cluster (a new CA, a server certificate for 127.0.0.1, ::1
	// and localhost, and a client certificate); clients must present the
	// client certificate. Cluster.ClientConfig carries it.
	TLS bool
	// RootPassword, when not empty, turns etcd's authentication on: the
	// user RootUser is created with this password and the root role before
	// StartCluster returns. Cluster.ClientConfig carries the credentials.
	RootPassword string
	// Logger receives etcd's server logs. nil means none. It is not used
	// with Binary: each process writes its log to <Dir>/<member>.log.
	Logger *zap.Logger
	// Binary, when not empty, is the path of an etcd server binary (etcd
	// v3.5 or newer, such as the one you run in production): the members
	// then run as separate processes of it on loopback ports instead of
	// inside the test process, and Member gains Kill (SIGKILL), Pause
	// (SIGSTOP) and Resume (SIGCONT). Every process is stopped by its PID
	// on Close; on Linux the kernel kills them too if the test process
	// dies. UnixSockets is not supported with it.
	Binary string
}

// withDefaults returns cfg with its zero values replaced, or a
// *ConfigError.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Members < 0 || cfg.Members > MaxMembers {
		return cfg, &ConfigError{Field: "Members", Reason: fmt.Sprintf("%d is not between 1 and %d", cfg.Members, MaxMembers)}
	}
	cfg.Members = max(cfg.Members, 1)
	cfg.TickInterval, cfg.ElectionTimeout = etcdproc.Timing(cfg.TickInterval, cfg.ElectionTimeout)
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"TickInterval", cfg.TickInterval}, {"ElectionTimeout", cfg.ElectionTimeout}} {
		if f.d < time.Millisecond || f.d%time.Millisecond != 0 {
			return cfg, &ConfigError{Field: f.name, Reason: fmt.Sprintf("%v is not a positive whole number of milliseconds", f.d)}
		}
	}
	if cfg.ElectionTimeout < 5*cfg.TickInterval {
		return cfg, &ConfigError{Field: "ElectionTimeout", Reason: fmt.Sprintf("%v is less than 5 ticks of %v", cfg.ElectionTimeout, cfg.TickInterval)}
	}
	if cfg.ElectionTimeout > 50*time.Second {
		return cfg, &ConfigError{Field: "ElectionTimeout", Reason: fmt.Sprintf("%v is more than etcd's 50s limit", cfg.ElectionTimeout)}
	}
	return cfg, nil
}

// Option changes how Start builds a cluster; each sets Config fields.
type Option interface {
	apply(*Config) error
}

type optionFunc func(*Config) error

func (f optionFunc) apply(c *Config) error { return f(c) }

// WithMembers sets the number of members, 1 to MaxMembers (default 1).
func WithMembers(n int) Option {
	return optionFunc(func(c *Config) error {
		if n < 1 || n > MaxMembers {
			return &ConfigError{Field: "Members", Reason: fmt.Sprintf("%d is not between 1 and %d", n, MaxMembers)}
		}
		c.Members = n
		return nil
	})
}

// WithTiming sets the raft heartbeat interval and election timeout (see
// Config.TickInterval and Config.ElectionTimeout; the defaults, 10 ms and
// 100 ms, allow 1 s lease TTLs). Slower timing suits slow machines.
func WithTiming(tick, election time.Duration) Option {
	return optionFunc(func(c *Config) error {
		c.TickInterval, c.ElectionTimeout = tick, election
		_, err := c.withDefaults()
		return err
	})
}

// WithoutFsync turns fsync off (Config.NoFsync): faster starts and writes.
func WithoutFsync() Option {
	return optionFunc(func(c *Config) error { c.NoFsync = true; return nil })
}

// WithUnixSockets serves clients on unix sockets (Config.UnixSockets).
func WithUnixSockets() Option {
	return optionFunc(func(c *Config) error { c.UnixSockets = true; return nil })
}

// WithTLS serves clients and peers over TLS with generated certificates
// (Config.TLS).
func WithTLS() Option {
	return optionFunc(func(c *Config) error { c.TLS = true; return nil })
}

// WithAuth turns authentication on with the user RootUser and the given
// password, which must not be empty (Config.RootPassword).
func WithAuth(rootPassword string) Option {
	return optionFunc(func(c *Config) error {
		if rootPassword == "" {
			return &ConfigError{Field: "RootPassword", Reason: "empty password"}
		}
		c.RootPassword = rootPassword
		return nil
	})
}

// WithBinary runs the members as processes of the etcd server binary at
// path (Config.Binary): your tests then run against the etcd version you
// deploy.
func WithBinary(path string) Option {
	return optionFunc(func(c *Config) error {
		if path == "" {
			return &ConfigError{Field: "Binary", Reason: "empty path"}
		}
		c.Binary = path
		return nil
	})
}

// WithLogger sends etcd's server logs to l (Config.Logger); by default
// there are none. zaptest.NewLogger(t) sends them to the test's log.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *Config) error { c.Logger = l; return nil })
}
