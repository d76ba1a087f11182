package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A three-member cluster outside a test: it keeps serving while its
// leader is down, and the restarted member has the data.
func ExampleStartCluster() {
	ctx := context.Background()
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{Members: 3, NoFsync: true})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	cli, err := cluster.NewClient()
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	fmt.Println(len(cluster.Members()), "members, on", strings.SplitN(cluster.Endpoints()[0], ":", 2)[0])

	kill := faults.KillLeader(cluster.FaultMembers()...)
	if err := kill.Inject(ctx); err != nil {
		panic(err)
	}
	if _, err := cli.Put(ctx, "greeting", "hello"); err != nil {
		panic(err)
	}
	if err := kill.Heal(ctx); err != nil { // restarts the old leader
		panic(err)
	}
	for _, m := range cluster.Members() {
		own, err := cluster.NewClient(m)
		if err != nil {
			panic(err)
		}
		resp, err := own.Get(ctx, "greeting")
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s\n", m.Name(), resp.Kvs[0].Value)
		own.Close()
	}
	// Output:
	// 3 members, on http
	// m0: hello
	// m1: hello
	// m2: hello
}

// Clients on unix sockets, with TLS and a root user: ClientConfig carries
// the certificates and the credentials.
func ExampleConfig() {
	ctx := context.Background()
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{UnixSockets: true, TLS: true, RootPassword: "s3cret"})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	cfg := cluster.ClientConfig()
	fmt.Println(strings.SplitN(cfg.Endpoints[0], ":", 2)[0], cfg.Username, cfg.TLS != nil)
	// Output:
	// unixs root true
}

// A client of its own behind a proxy, outside a test (as
// examples/httpguard does): cutting its link leaves the cluster, and
// every other client, untouched.
func ExampleCluster_NewClientThrough() {
	ctx := context.Background()
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	proxy, err := cluster.NewProxy(cluster.Members()[0])
	if err != nil {
		panic(err)
	}
	defer proxy.Close()
	behind, err := cluster.NewClientThrough(proxy)
	if err != nil {
		panic(err)
	}
	defer behind.Close()
	direct, err := cluster.NewClient()
	if err != nil {
		panic(err)
	}
	defer direct.Close()

	put := func(cli *clientv3.Client, val string) error {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := cli.Put(ctx, "k", val)
		return err
	}
	cut := faults.Partition(proxy)
	if err := cut.Inject(ctx); err != nil {
		panic(err)
	}
	fmt.Println("behind the cut proxy:", errors.Is(put(behind, "a"), context.DeadlineExceeded))
	fmt.Println("direct:", put(direct, "b"))
	if err := cut.Heal(ctx); err != nil {
		panic(err)
	}
	for put(behind, "c") != nil { // the client reconnects after Heal
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := direct.Get(ctx, "k")
	if err != nil {
		panic(err)
	}
	fmt.Printf("after Heal: %s\n", resp.Kvs[0].Value)
	// Output:
	// behind the cut proxy: true
	// direct: <nil>
	// after Heal: c
}
