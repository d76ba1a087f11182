//go:build unix

package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// BenchmarkManyLocks holds n locks with one Client (or Session) on an etcd
// in a separate process, so the heap figures are the client's alone. It
// reports acquisitions per second (64 at a time), client heap per held
// lock, keep-alive requests per second while holding them all (fencekit:
// one session lease per 1,000 locks, each renewed every TTL/3; etcd's
// Mutex: one session; measured over two keep-alive periods of the 10 s
// TTL, so one more or less per session is window alignment), and
// the watchers etcd keeps for the client while it holds them: the gauge
// etcd_debugging_mvcc_watcher_total read from the member's /metrics
// endpoint (etcd's client URL serves it), with nobody else connected.
// It ignores b.N: one run per implementation and n.
func BenchmarkManyLocks(b *testing.B) {
	endpoint := etcdProcess(b)
	ctx := context.Background()
	type holder struct {
		acquire func(i int) error
		close   func()
	}
	impls := []struct {
		name string
		ns   []int
		make func(cli *clientv3.Client) holder
	}{
		{"fencekit", []int{10_000, 100_000}, func(cli *clientv3.Client) holder {
			c, err := lease.New(cli, lease.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var held []*lease.Lease
			return holder{func(i int) error {
				l, err := c.Acquire(ctx, fmt.Sprintf("many-%d", i))
				mu.Lock()
				held = append(held, l)
				mu.Unlock()
				return err
			}, func() { c.Close() }}
		}},
		{"etcdmutex", []int{10_000}, func(cli *clientv3.Client) holder {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var held []*concurrency.Mutex
			return holder{func(i int) error {
				m := concurrency.NewMutex(s, fmt.Sprintf("many-em/%d", i))
				mu.Lock()
				held = append(held, m)
				mu.Unlock()
				return m.Lock(ctx)
			}, func() { s.Close() }}
		}},
	}
	for _, impl := range impls {
		for _, n := range impl.ns {
			b.Run(fmt.Sprintf("%s/n=%d", impl.name, n), func(b *testing.B) {
				{
					var keepalives atomic.Int64
					cli, err := clientv3.New(clientv3.Config{
						Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
						DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
							func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
								cs, err := streamer(ctx, desc, cc, method, opts...)
								if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
									return cs, err
								}
								return countingStream{cs, &keepalives}, nil
							})},
					})
					if err != nil {
						b.Fatal(err)
					}
					// Let what the previous run closed wind down, so
					// its heap is not counted against this one.
					runtime.GC()
					time.Sleep(time.Second)
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					h := impl.make(cli)
					start := time.Now()
					var (
						next atomic.Int64
						wg   sync.WaitGroup
					)
					for range 64 {
						wg.Go(func() {
							for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
								if err := h.acquire(int(i)); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					elapsed := time.Since(start)
					runtime.GC()
					runtime.ReadMemStats(&after)
					watchers, err := etcdGauge(endpoint, "etcd_debugging_mvcc_watcher_total")
					if err != nil {
						b.Fatal(err)
					}
					// Keep-alive requests sent over two keep-alive periods
					// (TTL/3 each).
					const window = 20 * time.Second / 3
					k0 := keepalives.Load()
					time.Sleep(window)
					perSec := float64(keepalives.Load()-k0) / window.Seconds()
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(watchers, "watchers")
					b.ReportMetric(float64(n)/elapsed.Seconds(), "acquires/s")
					b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heapB/lock")
					b.ReportMetric(perSec, "keepalives/s")
					h.close()
					cli.Close()
				}
			})
		}
	}
}

// countingStream counts the requests sent on a LeaseKeepAlive stream.
type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

const etcdProcessEnv = "FENCEKIT_BENCH_ETCD_DIR"

// init serves an embedded etcd when the test binary is re-executed by
// etcdProcess, printing its endpoint and running until stdin closes.
func init() {
	dir := os.Getenv(etcdProcessEnv)
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cl, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: dir})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(cl.Members()[0].ClientURL())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	cl.Close()
	os.Exit(0)
}

// etcdProcess starts an embedded etcd in a child process (this test binary
// re-executed) and returns its endpoint; it stops on cleanup.
func etcdProcess(b *testing.B) string {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdProcessEnv+"="+filepath.Join(b.TempDir(), "etcd"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("etcd process: %v", err)
	}
	return strings.TrimSpace(line)
}

// BenchmarkGuard is the cost of fencing a write: the HTTP middleware
// against the bare handler, and sqlguard's guarded UPDATE (row-column and
// fence-table modes) against a plain UPDATE, on SQLite and, when
// FENCEKIT_PG_DSN is set, PostgreSQL.

// etcdGauge reads one unlabelled metric from the /metrics endpoint that
// etcd serves on its client URL.
func etcdGauge(endpoint, name string) (float64, error) {
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(body)) {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("%s/metrics: no %s", endpoint, name)
}
