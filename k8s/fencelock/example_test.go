package fencelock_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Two candidates elect through client-go's LeaderElector and fencekit:
// each leader's ctx carries its term's fencing token, and the second
// leads only after the first stopped.
func Example() {
	cli, stop := exampleEtcd() // your etcd client
	defer stop()

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

// A candidate that stays up after a lost term: RunTerms cancels the
// term's runnables, waits until they returned and campaigns again, with a
// higher token. Here the term is lost by revoking its etcd session.
func ExampleLock_RunTerms() {
	cli, stop := exampleEtcd() // your etcd client
	defer stop()
	lock, err := fencelock.New(cli, "reports", "pod-a", fencelock.WithTTL(2*time.Second))
	if err != nil {
		panic(err)
	}
	defer lock.Close()

	ctx, cancel := context.WithCancel(context.Background())
	tokens := make(chan fence.Token, 2)
	done := make(chan error, 1)
	go func() {
		done <- lock.RunTerms(ctx, fencelock.Terms{
			New: func(ctx context.Context) ([]fencelock.Runnable, error) {
				return []fencelock.Runnable{{Name: "reports", Run: func(ctx context.Context) error {
					tok, _ := fence.FromContext(ctx) // hand ctx to sqlguard, guard.Transport, ...
					tokens <- tok
					<-ctx.Done()
					fmt.Println("term over:", context.Cause(ctx) != nil)
					return nil
				}}}, nil
			},
		})
	}()
	first := <-tokens
	fmt.Println("leading")
	// Someone revokes the leader's session: the term is lost.
	_, _, id, err := faults.Holder(ctx, cli, faults.LockPrefix(lease.DefaultPrefix, "reports"))
	if err != nil {
		panic(err)
	}
	if _, err := cli.Revoke(ctx, id); err != nil {
		panic(err)
	}
	second := <-tokens
	fmt.Println("leading again, with a higher token:", second.Revision > first.Revision)
	cancel()
	fmt.Println("RunTerms:", <-done)
	// Output:
	// leading
	// term over: true
	// leading again, with a higher token: true
	// term over: true
	// RunTerms: <nil>
}

// The Composite of the rollout from client-go's LeaseLock: the replica
// leads only while it holds both the Lease and the fencekit term (see the
// package doc and the README's "Adopting fencekit in a running
// controller"). Not run: it needs an API server.
func ExampleNewComposite() {
	var clientset kubernetes.Interface // the Pod's
	var etcdClient *clientv3.Client    // fencekit's etcd
	podName := os.Getenv("POD_NAME")

	leaseLock := &resourcelock.LeaseLock{ // exactly what the old binary uses
		LeaseMeta:  metav1.ObjectMeta{Namespace: "ops", Name: "reports"},
		Client:     clientset.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: podName},
	}
	lock, err := fencelock.New(etcdClient, "reports", podName, fencelock.WithTTL(15*time.Second))
	if err != nil {
		panic(err)
	}
	comp, err := fencelock.NewComposite(leaseLock, lock)
	if err != nil {
		panic(err)
	}
	defer comp.Close()
	le, err := comp.NewLeaderElector(leaderelection.LeaderElectionConfig{
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, // the old binary's
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				tok, _ := fence.FromContext(ctx) // the fencekit term's token
				fmt.Println("leading with token", tok.Revision)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		panic(err)
	}
	le.Run(context.Background())
}

// exampleEtcd starts an embedded etcd and returns a client of it, and a
// func that closes both.
func exampleEtcd() (*clientv3.Client, func()) {
	dir, err := os.MkdirTemp("", "fencelock-example")
	if err != nil {
		panic(err)
	}
	cluster, err := etcdtest.StartCluster(context.Background(), etcdtest.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	cli, err := cluster.NewClient()
	if err != nil {
		panic(err)
	}
	return cli, func() {
		_ = cli.Close()
		_ = cluster.Close()
		_ = os.RemoveAll(dir)
	}
}
