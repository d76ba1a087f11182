//go:build unix

package faults_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
)

// The etcd leader's process is frozen with SIGSTOP: the two others elect
// a new leader, and Heal continues the old one (SIGCONT), which rejoins as
// a follower. SigkillLeader is used the same way, with a restart on Heal.
// (Not run by go test: it needs an etcd server binary of yours; this
// package's TestSignalFaults injects and heals these faults on one built from
// tools/etcdserver.)
func ExampleSigstopLeader() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const bin = "/usr/local/bin/etcd" // your etcd server binary
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
}
