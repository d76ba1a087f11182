//go:build unix

package faults_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/internal/etcdproc"
)

// The etcd leader's process is frozen with SIGSTOP: the two others elect
// a new leader, and Heal continues the old one (SIGCONT), which rejoins as
// a follower. SigkillLeader is used the same way, with a restart on Heal.
func ExampleSigstopLeader() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Your etcd server binary, such as /usr/local/bin/etcd; fencekit's
	// tests build one from tools/etcdserver.
	bin, err := etcdproc.Binary(ctx, "")
	if err != nil {
		panic(err)
	}
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{Members: 3, Binary: bin, NoFsync: true})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	old := cluster.Leader()

	freeze := faults.SigstopLeader(cluster.ProcessMembers()...)
	fmt.Println("inject:", freeze.Inject(ctx))
	fmt.Println("new leader elected:", cluster.WaitLeader(ctx) == nil && cluster.Leader() != old)
	fmt.Println("heal:", freeze.Heal(ctx))
	fmt.Println("all agree on a leader:", cluster.WaitLeader(ctx))
	// Output:
	// inject: <nil>
	// new leader elected: true
	// heal: <nil>
	// all agree on a leader: <nil>
}
