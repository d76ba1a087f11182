//go:build unix

package walkthrough_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	// The workers are this test binary, run again.
	faults.ServeWorker(map[string]faults.WorkerFunc{"orders": ordersWorker})
	goleak.VerifyTestMain(m)
}

// walkthrough:begin

// ordersWorker is the code under test, as a service would run it: it
// holds the lease "orders" and, under it, adds elements to the orders log
// through its fenced HTTP API. It does not look at its lease between
// writes: a holder that was paused past its TTL writes with a stale token,
// and the fence must refuse it. It prints an AckLine for every write the
// log acknowledged.
func ordersWorker(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","), Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	locks, err := lease.New(cli, lease.WithTTL(time.Second))
	if err != nil {
		return err
	}
	defer locks.Close()
	client := &http.Client{Transport: &guard.Transport{}}
	for elem := int64(os.Getpid()) * 1e6; ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		l, err := locks.Acquire(ctx, "orders")
		for i := 0; err == nil && i < 5; i++ {
			elem++
			url := os.Getenv("ORDERS_URL") + "?elem=" + strconv.FormatInt(elem, 10)
			req, _ := http.NewRequestWithContext(fence.NewContext(ctx, l.Fence()), http.MethodPost, url, nil)
			if resp, err := client.Do(req); err == nil && resp.Body.Close() == nil && resp.StatusCode == http.StatusNoContent {
				fmt.Print(check.AckLine(elem))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err == nil {
			_ = l.Release(ctx)
		}
	}
	return nil
}

// Two worker processes take turns under a lease and write an orders log
// through guard's HTTP middleware, on a three-member etcd. One is frozen
// past its lease TTL, then the etcd leader is killed; the history of the
// log must still keep every rule of package check.
func Example_walkthrough() {
	ctx := context.Background()
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{Members: 3})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	// The protected resource: an orders log behind guard's middleware
	// that records, in order, the writes it applied.
	var history check.History
	g, _ := guard.New(guard.NewMemoryStore())
	fenced := g.Middleware(func(*http.Request) (guard.Target, bool) {
		return guard.Target{Resource: "orders-log", Lock: "orders"}, true
	})
	log := httptest.NewServer(fenced(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := guard.TokenFromHeader(r.Header)
		elem, _ := strconv.ParseInt(r.URL.Query().Get("elem"), 10, 64)
		history.Apply(token.Revision, elem)
		w.WriteHeader(http.StatusNoContent)
	})))
	defer log.Close()

	// Two workers, each a process of its own (see ordersWorker).
	env := []string{"ETCD_ENDPOINTS=" + strings.Join(cluster.Endpoints(), ","), "ORDERS_URL=" + log.URL}
	w1, err1 := faults.StartWorker("orders", env, history.AckWriter(os.Stderr), os.Stderr)
	w2, err2 := faults.StartWorker("orders", env, history.AckWriter(os.Stderr), os.Stderr)
	if err := errors.Join(err1, err2); err != nil {
		panic(err)
	}
	time.Sleep(time.Second)
	// Freeze one worker past its lease TTL, then kill the etcd leader.
	fmt.Println("pause:", faults.Apply(ctx, faults.Pause(w1), 2500*time.Millisecond))
	fmt.Println("leader kill:", faults.Apply(ctx, faults.KillLeader(cluster.FaultMembers()...), time.Second))
	time.Sleep(time.Second)
	fmt.Println("workers exit:", w1.Stop(ctx), w2.Stop(ctx))

	report, _ := history.Check()
	fmt.Println("several holders wrote:", report.Tokens > 1)
	fmt.Println("check:", report.Err())
	// Output:
	// pause: <nil>
	// leader kill: <nil>
	// workers exit: <nil> <nil>
	// several holders wrote: true
	// check: <nil>
}

// walkthrough:end
