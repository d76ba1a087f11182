package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/lease"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// connFlags are the etcd connection settings every subcommand but etcd
// takes, named as etcdctl names them, with the ETCDCTL_* environment
// variables as defaults, plus the lock key prefix and TTL.
type connFlags struct {
	endpoints      string
	cacert         string
	cert, key      string
	insecureSkip   bool
	user, password string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	prefix         string
	ttl            time.Duration
	withTTL        bool // the command takes --ttl

	envErr error               // a bad value in the environment, reported after parsing
	getenv func(string) string // for the credentials, read after parsing
}

const connHelp = `Connection flags default to etcdctl's environment variables
(ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER,
ETCDCTL_PASSWORD, ETCDCTL_DIAL_TIMEOUT, ETCDCTL_COMMAND_TIMEOUT,
ETCDCTL_INSECURE_SKIP_TLS_VERIFY); --prefix to FENCEKIT_PREFIX and (run, elect)
--ttl to FENCEKIT_TTL. With --user NAME and no password given, fencekit asks for it
on the terminal.`

// register adds the connection flags to fs, with defaults from getenv.
func (c *connFlags) register(fs *flagSet, getenv func(string) string, withTTL bool) {
	str := func(p *string, name, env, def, usage string) {
		if v := getenv(env); v != "" {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+env+")")
	}
	dur := func(p *time.Duration, name, env string, def time.Duration, usage string) {
		if v := getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				c.envErr = errors.Join(c.envErr, fmt.Errorf("%s=%q: %w", env, v, err))
			} else {
				def = d
			}
		}
		fs.DurationVar(p, name, def, usage+" (env "+env+")")
	}
	str(&c.endpoints, "endpoints", "ETCDCTL_ENDPOINTS", "127.0.0.1:2379", "comma-separated etcd endpoints")
	str(&c.cacert, "cacert", "ETCDCTL_CACERT", "", "verify etcd's TLS certificate with this CA bundle")
	str(&c.cert, "cert", "ETCDCTL_CERT", "", "TLS client certificate file")
	str(&c.key, "key", "ETCDCTL_KEY", "", "TLS client key file")
	insecure := false
	if v := getenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			c.envErr = errors.Join(c.envErr, fmt.Errorf("ETCDCTL_INSECURE_SKIP_TLS_VERIFY=%q: not a boolean", v))
		}
		insecure = b
	}
	fs.BoolVar(&c.insecureSkip, "insecure-skip-tls-verify", insecure, "do not verify etcd's TLS certificate (env ETCDCTL_INSECURE_SKIP_TLS_VERIFY)")
	// Not defaults from the environment, which --help would print: the
	// environment is read after parsing (see check).
	fs.StringVar(&c.user, "user", "", "etcd user name, or NAME:PASSWORD (env ETCDCTL_USER)")
	fs.StringVar(&c.password, "password", "", "etcd password (prefer the environment variable; asked on the terminal when --user has none) (env ETCDCTL_PASSWORD)")
	c.getenv = getenv
	dur(&c.dialTimeout, "dial-timeout", "ETCDCTL_DIAL_TIMEOUT", 2*time.Second, "how long to wait for etcd to answer the first request")
	dur(&c.commandTimeout, "command-timeout", "ETCDCTL_COMMAND_TIMEOUT", 5*time.Second, "bound on each request after the first")
	str(&c.prefix, "prefix", "FENCEKIT_PREFIX", lease.DefaultPrefix, "etcd key prefix of the lock records")
	c.withTTL = withTTL
	if withTTL {
		dur(&c.ttl, "ttl", "FENCEKIT_TTL", lease.DefaultTTL, "session TTL, rounded up to whole seconds: how long a crashed holder blocks others")
	}
}

// check validates the settings after parsing; errors are usage errors.
func (c *connFlags) check() error {
	if c.envErr != nil {
		return c.envErr
	}
	if c.user == "" {
		c.user = c.getenv("ETCDCTL_USER")
	}
	if c.password == "" {
		c.password = c.getenv("ETCDCTL_PASSWORD")
	}
	if len(c.endpointList()) == 0 {
		return errors.New("--endpoints is empty")
	}
	if err := c.checkValues(); err != nil {
		return err
	}
	// New does no I/O: it only validates the options.
	locks, err := lease.New(&clientv3.Client{}, c.options()...)
	if err != nil {
		return err
	}
	return locks.Close()
}

// checkValues names the flag of a value out of range.
func (c *connFlags) checkValues() error {
	switch {
	case c.dialTimeout <= 0:
		return fmt.Errorf("--dial-timeout %v must be positive", c.dialTimeout)
	case c.commandTimeout <= 0:
		return fmt.Errorf("--command-timeout %v must be positive", c.commandTimeout)
	case (c.cert == "") != (c.key == ""):
		return errors.New("--cert and --key go together")
	case c.prefix == "" || c.prefix == "/":
		return fmt.Errorf("--prefix %q: want a key prefix such as %q", c.prefix, lease.DefaultPrefix)
	case !c.withTTL:
		return nil
	case c.ttl < time.Second:
		return fmt.Errorf("--ttl %v is below etcd's minimum lease TTL (1.5 election timeouts: 2s with etcd's default settings)", c.ttl)
	case c.ttl > time.Hour:
		return fmt.Errorf("--ttl %v is above the 1h fencekit allows", c.ttl)
	}
	return nil
}

// explain rewords an error of the lease package that a flag caused so
// that it names the flag; other errors are returned as they are.
func (c *connFlags) explain(err error) error {
	if errors.Is(err, lease.ErrTTLTooShort) {
		return fmt.Errorf("--ttl %v is below this etcd's minimum lease TTL (1.5 election timeouts: 2s with etcd's default settings): use a longer --ttl: %w",
			roundTTL(c.ttl), lease.ErrTTLTooShort)
	}
	return err
}

func (c *connFlags) endpointList() []string {
	var eps []string
	for ep := range strings.SplitSeq(c.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// options are the lease options the flags select.
func (c *connFlags) options(extra ...lease.Option) []lease.Option {
	opts := []lease.Option{lease.WithPrefix(c.prefix)}
	if c.ttl != 0 {
		opts = append(opts, lease.WithTTL(c.ttl))
	}
	return append(opts, extra...)
}

// connError is a failure to reach or authenticate to etcd.
type connError struct{ err error }

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// connect returns an etcd client, after one read under the prefix has
// answered within the dial timeout (clientv3 connects lazily, so without
// it an unreachable etcd would show only at the first real request).
func (c *connFlags) connect(e *Env) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   c.endpointList(),
		DialTimeout: c.dialTimeout,
		Logger:      zap.NewNop(),
	}
	if c.cacert != "" || c.cert != "" || c.insecureSkip {
		info := transport.TLSInfo{CertFile: c.cert, KeyFile: c.key, TrustedCAFile: c.cacert, InsecureSkipVerify: c.insecureSkip}
		tc, err := info.ClientConfig()
		if err != nil {
			return nil, &connError{fmt.Errorf("TLS settings: %w", err)}
		}
		cfg.TLS = tc
	}
	if c.user != "" {
		name, pass, ok := strings.Cut(c.user, ":")
		if !ok {
			pass = c.password
		}
		if pass == "" {
			p, err := readPassword(e)
			if err != nil {
				return nil, &connError{err}
			}
			pass = p
		}
		cfg.Username, cfg.Password = name, pass
	}
	cli, err := clientv3.New(cfg) // with credentials, New authenticates
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, &connError{fmt.Errorf("etcd at %s did not answer within %v (--dial-timeout): %w", c.endpoints, c.dialTimeout, err)}
	}
	if err != nil {
		return nil, &connError{fmt.Errorf("etcd at %s: %w", c.endpoints, err)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.dialTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, &connError{fmt.Errorf("etcd at %s did not answer within %v (--dial-timeout): %w", c.endpoints, c.dialTimeout, err)}
		}
		return nil, &connError{fmt.Errorf("etcd at %s: %w", c.endpoints, err)}
	}
	return cli, nil
}

// readPassword asks for the password on the terminal, without echo.
func readPassword(e *Env) (string, error) {
	f, ok := e.Stdin.(*os.File)
	if !ok || !isTerminal(f) {
		return "", errors.New("--user has no password: give NAME:PASSWORD, --password or ETCDCTL_PASSWORD")
	}
	fmt.Fprint(e.Stderr, "Password: ")
	restore, err := noEcho(f)
	if err != nil {
		return "", fmt.Errorf("read password: %w", err)
	}
	line, err := bufio.NewReader(f).ReadString('\n')
	restore()
	fmt.Fprintln(e.Stderr)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// exitCode maps an error from etcd or the lease package to an exit code.
// Every lease sentinel has its code (exitcode_test.go holds each to it):
//
//   - a usage error (64): an invalid lock name or set of names, a TTL etcd would raise, a
//     lock used with another kind or size (ErrMismatch): calling again
//     the same way cannot help;
//   - not acquired (75): ErrHeld (also when a try that found the lock
//     held could not confirm its records gone: a *LeftBehindError);
//   - lost (79): the lease ended without being released (ErrLost and its
//     causes, ErrNotOwner, ErrNotFound);
//   - refused (1): a force release naming another holder (NotHolderError,
//     which release reports before it gets here);
//   - internal (70): the Client closed or a lease released under fencekit,
//     or no leader where one was expected (leader handles ErrNoLeader
//     itself, as a "no"); fencekit uses none of these that way, so it is
//     a bug;
//   - a connection error (69): permission denied, an outcome unknown,
//     records a failed try left behind for another reason (ErrLeftBehind),
//     and everything else (etcd's own errors, a deadline, a retryable
//     failure).
//
// The order matters where an error matches several: a lost lease that is
// also retryable is lost.
func exitCode(err error) int {
	var nh *lease.NotHolderError
	switch {
	case errors.As(err, &nh), errors.Is(err, lease.ErrNotCandidate):
		return ExitRefused
	case errors.Is(err, lease.ErrInvalidName), errors.Is(err, lease.ErrInvalidSet), errors.Is(err, lease.ErrInvalidOption),
		errors.Is(err, lease.ErrTTLTooShort),
		errors.Is(err, lease.ErrMismatch):
		return ExitUsage
	case errors.Is(err, lease.ErrHeld):
		return ExitNotAcquired
	case errors.Is(err, lease.ErrServerTooOld):
		return ExitServerTooOld
	case lostErr(err):
		return ExitLost
	case errors.Is(err, lease.ErrClosed), errors.Is(err, lease.ErrReleased), errors.Is(err, lease.ErrNoLeader),
		errors.Is(err, lease.ErrReleaseRequested):
		return ExitSoftware
	}
	// ErrPermissionDenied, ErrOutcomeUnknown, ErrRetryable, and errors
	// from etcd or the network.
	return ExitConn
}

// lostErr reports whether err says a lease ended without its holder
// releasing it.
func lostErr(err error) bool {
	for _, e := range []error{lease.ErrLost, lease.ErrNotOwner, lease.ErrNotFound, lease.ErrKeyDeleted,
		lease.ErrKeyOverwritten, lease.ErrSessionExpired, lease.ErrDeadline, lease.ErrMaxHold} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
