// Command metrics serves fencekit's Prometheus metrics, as a service that
// uses every fenced package would, after a short story that moves them: on
// an embedded etcd in a temporary directory (started with the public test
// harness, integration/etcdtest), holder A takes lock "orders" and writes
// through guard and sqlguard (SQLite in a temporary file); A's session is
// revoked, so A loses its lease; B takes the lock and writes; A's late
// writes are refused as stale by both guards, and its release finds the
// lease gone; B releases twice (a duplicate release); holder C keeps lock
// "reports" so that the headroom gauge has a session to report. redisguard
// and objguard Guards are registered as well (their decisions counted from
// zero; neither server is contacted).
//
//	go run ./examples/metrics -listen 127.0.0.1:9464 -serve 10m
//
// It prints the address of /metrics, serves it for -serve (0: exit after
// the story), and leaves nothing behind. The files under monitoring/
// (alerting and recording rules, a Grafana dashboard) are written over
// these series; this program's test scrapes it and fails when a series or
// label they use does not exist.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/objguard"
	"github.com/fencekit/fencekit/redisguard"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	_ "modernc.org/sqlite"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9464", "address to serve /metrics on")
	serve := flag.Duration("serve", 0, "how long to serve /metrics after the story (0: exit at once)")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+*serve)
	defer cancel()
	err = run(ctx, ln, os.Stdout, func(ctx context.Context) error {
		select {
		case <-time.After(*serve):
		case <-ctx.Done():
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// run tells the story with the metrics served on ln, then calls wait
// (which returns when serving may stop) and cleans up. It returns an
// error when a step did not happen as printed.
func run(ctx context.Context, ln net.Listener, out io.Writer, wait func(context.Context) error) error {
	reg := prometheus.NewRegistry()
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	etcd, err := etcdtest.StartCluster(ctx, etcdtest.Config{})
	if err != nil {
		return err
	}
	defer etcd.Close()
	s := &story{out: out, reg: reg}
	defer s.cleanup()
	if err := s.setUp(ctx, etcd); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{s.aWrites, s.aLoses, s.bTakesOver, s.aWritesLate, s.bReleasesTwice} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "metrics at http://%s/metrics\n", ln.Addr())
	return wait(ctx)
}

// story is the cast: three holders' lease clients on one registry, the
// guards, the database.
type story struct {
	out      io.Writer
	reg      *prometheus.Registry
	cli      *clientv3.Client // for the fault; no holder uses it
	a, b, c  *lease.Client
	leaseA   *lease.Lease
	leaseB   *lease.Lease
	g        *guard.Guard
	sg       *sqlguard.Guard
	db       *sql.DB
	cleanups []func()
}

func (s *story) onCleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *story) cleanup() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// setUp connects the holders and makes the guards, all reporting to s.reg.
func (s *story) setUp(ctx context.Context, etcd *etcdtest.Cluster) error {
	var err error
	if s.cli, err = etcd.NewClient(); err != nil {
		return err
	}
	s.onCleanup(func() { s.cli.Close() })
	for _, p := range []**lease.Client{&s.a, &s.b, &s.c} {
		if *p, err = s.newHolder(etcd); err != nil {
			return err
		}
	}
	if _, err := s.c.Acquire(ctx, "reports"); err != nil {
		return err
	}
	if s.g, err = guard.New(guard.NewMemoryStore(), guard.WithMetrics(s.reg)); err != nil {
		return err
	}
	if err := s.openDB(ctx); err != nil {
		return err
	}
	return s.otherGuards()
}

func (s *story) newHolder(etcd *etcdtest.Cluster) (*lease.Client, error) {
	cli, err := etcd.NewClient()
	if err != nil {
		return nil, err
	}
	locks, err := lease.New(cli, lease.WithMetrics(s.reg))
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.onCleanup(func() {
		locks.Close()
		cli.Close()
	})
	return locks, nil
}

// openDB opens SQLite in a temporary directory with sqlguard's tables.
func (s *story) openDB(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "fencekit-metrics-")
	if err != nil {
		return err
	}
	s.onCleanup(func() { os.RemoveAll(dir) })
	if s.db, err = sql.Open("sqlite", filepath.Join(dir, "orders.db")); err != nil {
		return err
	}
	s.onCleanup(func() { s.db.Close() })
	s.db.SetMaxOpenConns(1)
	if s.sg, err = sqlguard.New(sqlguard.SQLite, sqlguard.WithMetrics(s.reg)); err != nil {
		return err
	}
	if err := s.sg.Migrate(ctx, s.db); err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY, note TEXT NOT NULL)")
	return err
}

// otherGuards registers a redisguard and an objguard Guard, whose
// decisions are counted from zero; neither contacts its server here.
func (s *story) otherGuards() error {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	s.onCleanup(func() { rdb.Close() })
	if _, err := redisguard.New(rdb, redisguard.WithMetrics(s.reg)); err != nil {
		return err
	}
	s3c := s3.New(s3.Options{Region: "none"})
	_, err := objguard.New(context.Background(), s3c, "orders", objguard.WithoutProbe(), objguard.WithMetrics(s.reg))
	return err
}

// write writes order 1 with token t through both guards; it returns the
// guard's error and sqlguard's.
func (s *story) write(ctx context.Context, t fence.Token, note string) (error, error) {
	tgt := guard.Target{Resource: "order/1", Lock: "orders"}
	gerr := s.g.Do(ctx, tgt, t, func(context.Context) error { return nil })
	serr := s.sg.RunTx(ctx, s.db, nil, t, []string{"order/1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO orders (id, note) VALUES ('1', ?) ON CONFLICT (id) DO UPDATE SET note = excluded.note", note)
		return err
	})
	return gerr, serr
}

func (s *story) aWrites(ctx context.Context) error {
	var err error
	if s.leaseA, err = s.a.Acquire(ctx, "orders"); err != nil {
		return err
	}
	gerr, serr := s.write(ctx, s.leaseA.Fence(), "by A")
	fmt.Fprintf(s.out, "A holds orders (token %s) and writes: %v, %v\n", s.leaseA.Fence(), gerr, serr)
	return errors.Join(gerr, serr)
}

// aLoses revokes A's session, as its expiry after a long pause would.
func (s *story) aLoses(ctx context.Context) error {
	revoke := faults.RevokeHolder(s.cli, faults.LockPrefix(lease.DefaultPrefix, "orders"))
	if err := revoke.Inject(ctx); err != nil {
		return err
	}
	select {
	case <-s.leaseA.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Fprintln(s.out, "A's session is revoked; its lease is lost:", errors.Is(s.leaseA.Err(), lease.ErrLost))
	return nil
}

func (s *story) bTakesOver(ctx context.Context) error {
	var err error
	if s.leaseB, err = s.b.Acquire(ctx, "orders"); err != nil {
		return err
	}
	gerr, serr := s.write(ctx, s.leaseB.Fence(), "by B")
	fmt.Fprintf(s.out, "B holds orders (token %s) and writes: %v, %v\n", s.leaseB.Fence(), gerr, serr)
	return errors.Join(gerr, serr)
}

// aWritesLate: both guards refuse A's old token, and A's release finds
// its lease gone.
func (s *story) aWritesLate(ctx context.Context) error {
	gerr, serr := s.write(ctx, s.leaseA.Fence(), "late by A")
	fmt.Fprintf(s.out, "A writes late with token %s: %v; %v\n", s.leaseA.Fence(), gerr, serr)
	if !errors.Is(gerr, fence.ErrStale) || !errors.Is(serr, fence.ErrStale) {
		return fmt.Errorf("late writes of A: %v, %v; want both stale", gerr, serr)
	}
	err := s.leaseA.Release(ctx)
	fmt.Fprintln(s.out, "A releases:", err)
	if err == nil {
		return errors.New("release of A's lost lease succeeded")
	}
	return nil
}

func (s *story) bReleasesTwice(ctx context.Context) error {
	if err := s.leaseB.Release(ctx); err != nil {
		return err
	}
	err := s.leaseB.Release(ctx)
	fmt.Fprintln(s.out, "B releases twice; the second:", err)
	return nil
}
