package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

const etcdHelp = `Run a single-member etcd inside this process, for local development and
demos: no etcd binary needed. It serves plain HTTP without authentication, so
keep it on a loopback address. SIGINT or SIGTERM stops it; the data stays in
--data-dir for the next start.

Example:
  fencekit etcd --data-dir /tmp/fk.etcd &
  fencekit run demo -- sh -c 'echo "token: $FENCING_TOKEN"'`

func cmdEtcd(args []string, e *Env) int {
	fs := newFlagSet("etcd", etcdHelp)
	dataDir := fs.String("data-dir", "fencekit.etcd", "directory for etcd's data")
	listen := fs.String("listen", "127.0.0.1:2379", "client address, host:port")
	peer := fs.String("listen-peer", "127.0.0.1:2380", "peer address, host:port (no peers join; etcd needs one)")
	pos, err := parse(fs, args, e)
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q", pos[0])
	}
	var cu, pu *url.URL
	if err == nil {
		cu, err = hostPortURL("--listen", *listen)
	}
	if err == nil {
		pu, err = hostPortURL("--listen-peer", *peer)
	}
	if err == nil && *dataDir == "" {
		err = errors.New("--data-dir is empty")
	}
	if err != nil {
		return usageFail(e, "etcd", err)
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)

	cfg := embed.NewConfig()
	cfg.Name = "fencekit"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return fail(e, "etcd", ExitConn, fmt.Errorf("start: %w", err))
	}
	defer etcd.Close()
	select {
	case <-etcd.Server.ReadyNotify():
	case err := <-etcd.Err():
		return fail(e, "etcd", ExitConn, err)
	case <-time.After(time.Minute):
		return fail(e, "etcd", ExitConn, errors.New("not ready within a minute"))
	}
	if ip := net.ParseIP(cu.Hostname()); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(e.Stderr, "fencekit etcd: warning: %s is not a loopback address; this etcd has no TLS and no authentication\n", *listen)
	}
	fmt.Fprintf(e.Stderr, "fencekit etcd: serving on %s (data in %s); SIGINT or SIGTERM stops it\n", cu, *dataDir)
	select {
	case s := <-sigc:
		fmt.Fprintf(e.Stderr, "fencekit etcd: %v: stopping\n", s)
		return ExitOK
	case err := <-etcd.Err():
		return fail(e, "etcd", ExitConn, err)
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
