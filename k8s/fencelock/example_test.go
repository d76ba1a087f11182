package fencelock_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"k8s.io/client-go/tools/leaderelection"
)

// Two candidates elect through client-go's LeaderElector and fencekit:
// each leader's ctx carries its term's fencing token, and the second
// leads only after the first stopped.
func Example() {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cluster, err := etcdtest.StartCluster(context.Background(), etcdtest.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	cli, err := cluster.NewClient()
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	tokens := make(chan fence.Token, 2)
	candidate := func(ctx context.Context, identity string, done chan<- struct{}) {
		defer close(done)
		lock, err := fencelock.New(cli, "reports", identity, fencelock.WithTTL(2*time.Second))
		if err != nil {
			panic(err)
		}
		defer lock.Close()
		le, err := lock.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					tok, _ := fence.FromContext(ctx) // hand ctx to sqlguard, guard.Transport, ...
					fmt.Println(identity, "leads")
					tokens <- tok
				},
				OnStoppedLeading: func() { fmt.Println(identity, "stopped leading") },
			},
		})
		if err != nil {
			panic(err)
		}
		le.Run(ctx)
	}

	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go candidate(ctxA, "pod-a", doneA)
	first := <-tokens

	ctxB, stopB := context.WithCancel(context.Background())
	doneB := make(chan struct{})
	go candidate(ctxB, "pod-b", doneB)
	time.Sleep(200 * time.Millisecond) // pod-b waits in etcd's queue
	stopA()
	<-doneA
	second := <-tokens
	fmt.Println("pod-b's term is newer:", second.Revision > first.Revision)
	stopB()
	<-doneB
	// Output:
	// pod-a leads
	// pod-a stopped leading
	// pod-b leads
	// pod-b's term is newer: true
	// pod-b stopped leading
}
