package faults_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
)

// A holder's write is delivered late: to the holder it looks timed out, and
// it lands after the next holder's.
func ExampleSlowWriter() {
	var (
		mu  sync.Mutex
		log []string // what the resource applied, in order
	)
	write := func(s string) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			log = append(log, s)
			return nil
		}
	}
	slow := faults.NewSlowWriter(50 * time.Millisecond)

	ctx := context.Background()
	_ = slow.Inject(ctx)
	err := slow.Write(write("A, token 5"))
	fmt.Println("A's write:", err)
	_ = slow.Heal(ctx)

	// A gives up its lease; B acquires and writes at once.
	fmt.Println("B's write:", slow.Write(write("B, token 7")))
	slow.Wait()
	fmt.Println(log)
	// Output:
	// A's write: faults: write delayed; it will land late
	// B's write: <nil>
	// [B, token 7 A, token 5]
}

// A client behind a Proxy loses its link in a partition and gets it back
// after Heal.
func ExamplePartition() {
	echo := startEcho()
	defer echo.Close()
	proxy, err := faults.NewProxy(echo.Addr().String())
	if err != nil {
		panic(err)
	}
	defer proxy.Close()

	roundTrip := func() string {
		c, err := net.Dial("tcp", proxy.Addr())
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		fmt.Fprintln(c, "ping")
		line, err := bufio.NewReader(c).ReadString('\n')
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return "timed out"
		}
		return line[:len(line)-1]
	}

	cut := faults.Partition(proxy)
	fmt.Println(cut.Kind())
	_ = cut.Inject(context.Background())
	fmt.Println("during:", roundTrip())
	_ = cut.Heal(context.Background())
	fmt.Println("after:", roundTrip())
	// Output:
	// partition
	// during: timed out
	// after: ping
}

// Deleting the holder's record behind its back ends its lease at once;
// the holder learns it from Done and Err.
func ExampleDeleteHolder() {
	ctx := context.Background()
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	cli, err := cluster.NewClient()
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	locks, err := lease.New(cli, lease.WithTTL(time.Second))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	l, err := locks.Acquire(ctx, "orders")
	if err != nil {
		panic(err)
	}
	del := faults.DeleteHolder(cli, faults.LockPrefix(lease.DefaultPrefix, "orders"))
	if err := faults.Apply(ctx, del, 0); err != nil {
		panic(err)
	}
	<-l.Done()
	fmt.Println(errors.Is(l.Err(), lease.ErrKeyDeleted))
	// Nobody holds it now.
	err = faults.Apply(ctx, del, 0)
	fmt.Println(errors.Is(err, faults.ErrNoTarget))
	// Output:
	// true
	// true
}

// A holder is partitioned while its record is deleted and etcd compacts
// the history its watch would resume from: when the partition heals, it
// must still learn that its lease is gone.
func ExampleCompactedWatch() {
	ctx := context.Background()
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	admin, err := cluster.NewClient()
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	proxy, err := cluster.NewProxy(cluster.Members()[0])
	if err != nil {
		panic(err)
	}
	defer proxy.Close()
	cli, err := cluster.NewClientThrough(proxy)
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	l, err := locks.Acquire(ctx, "orders")
	if err != nil {
		panic(err)
	}
	f := faults.CompactedWatch(admin, faults.LockPrefix(lease.DefaultPrefix, "orders"), proxy)
	if err := faults.Apply(ctx, f, 100*time.Millisecond); err != nil {
		panic(err)
	}
	<-l.Done()
	fmt.Println(f.Kind(), errors.Is(l.Err(), lease.ErrLost))
	// Output:
	// compacted-watch true
}

// startEcho serves lines back on a loopback port.
func startEcho() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Fprintln(c, s.Text())
				}
			}()
		}
	}()
	return ln
}
