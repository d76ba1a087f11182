// Command fencekit-dev-etcd runs a single-member etcd inside one process,
// for local development and demos of fencekit: no etcd binary needed.
//
//	go run ./integration/cmd/fencekit-dev-etcd --data-dir /tmp/fk.etcd &  # in a checkout
//	fencekit run demo -- sh -c 'echo "token: $FENCING_TOKEN"'
//
// It serves plain HTTP without authentication, so keep it on a loopback
// address (it warns otherwise). SIGINT or SIGTERM stops it; the data stays
// in --data-dir for the next start.
//
// It lives in the integration module, which already requires etcd's server
// (go.etcd.io/etcd/server/v3/embed) for its tests, so that the fencekit
// command, which goes into production images, links only etcd's client.
//
// Exit codes: 0 stopped by SIGINT or SIGTERM; 1 etcd failed to start or
// stopped with an error; 64 usage error (a bad flag or address).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 64
)

const help = `Usage: fencekit-dev-etcd [--data-dir DIR] [--listen HOST:PORT] [--listen-peer HOST:PORT]

Run a single-member etcd inside this process, for local development and
demos of fencekit: no etcd binary needed. It serves plain HTTP without
authentication, so keep it on a loopback address. SIGINT or SIGTERM stops
it; the data stays in --data-dir for the next start.

Example:
  fencekit-dev-etcd --data-dir /tmp/fk.etcd &
  fencekit run demo -- sh -c 'echo "token: $FENCING_TOKEN"'

Exit codes: 0 stopped by SIGINT or SIGTERM; 1 etcd failed to start or
stopped with an error; 64 usage error.

Flags:`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags select.
type config struct {
	dataDir      string
	client, peer *url.URL
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "fencekit-dev-etcd: %v (see 'fencekit-dev-etcd --help')\n", err)
		return exitUsage
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)

	etcd, err := startEtcd(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "fencekit-dev-etcd: %v\n", err)
		return exitFail
	}
	defer etcd.Close()
	if ip := net.ParseIP(cfg.client.Hostname()); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(stderr, "fencekit-dev-etcd: warning: %s is not a loopback address; this etcd has no TLS and no authentication\n", cfg.client.Host)
	}
	fmt.Fprintf(stderr, "fencekit-dev-etcd: serving on %s (data in %s); SIGINT or SIGTERM stops it\n", cfg.client, cfg.dataDir)
	select {
	case s := <-sigc:
		fmt.Fprintf(stderr, "fencekit-dev-etcd: %v: stopping\n", s)
		return exitOK
	case err := <-etcd.Err():
		fmt.Fprintf(stderr, "fencekit-dev-etcd: %v\n", err)
		return exitFail
	}
}

// parseFlags parses args; on -h it prints help to stdout and returns
// flag.ErrHelp.
func parseFlags(args []string, stdout io.Writer) (*config, error) {
	fs := flag.NewFlagSet("fencekit-dev-etcd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dataDir := fs.String("data-dir", "fencekit.etcd", "directory for etcd's data")
	listen := fs.String("listen", "127.0.0.1:2379", "client address, host:port")
	peer := fs.String("listen-peer", "127.0.0.1:2380", "peer address, host:port (no peers join; etcd needs one)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, help)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *dataDir == "" {
		return nil, errors.New("--data-dir is empty")
	}
	cu, err := hostPortURL("--listen", *listen)
	if err != nil {
		return nil, err
	}
	pu, err := hostPortURL("--listen-peer", *peer)
	if err != nil {
		return nil, err
	}
	return &config{dataDir: *dataDir, client: cu, peer: pu}, nil
}

// startEtcd starts the member and waits until it serves.
func startEtcd(c *config) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "fencekit"
	cfg.Dir = c.dataDir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*c.client}, []url.URL{*c.client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*c.peer}, []url.URL{*c.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	select {
	case <-etcd.Server.ReadyNotify():
		return etcd, nil
	case err := <-etcd.Err():
		etcd.Close()
		return nil, fmt.Errorf("start: %w", err)
	case <-time.After(time.Minute):
		etcd.Close()
		return nil, errors.New("start: not ready within a minute")
	}
}

// hostPortURL turns "host:port" into an http URL.
func hostPortURL(flagName, hp string) (*url.URL, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("%s %q: want HOST:PORT", flagName, hp)
	}
	return &url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}, nil
}
