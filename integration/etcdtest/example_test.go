package etcdtest_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
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
