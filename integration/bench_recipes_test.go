//go:build unix

package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkElection is a leader failover after a resignation, two
// candidates each on its own connection, in steady state: fencekit's
// Election (Campaign/Resign), etcd's concurrency.Election, and fencekit's
// plain lock handoff (lock) as the reference, interleaved. One operation
// is one change of leader.
func BenchmarkElection(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 2
	relayOf := func(name string, acquire func(ctx context.Context, i int) (func() error, error)) *relay {
		r, err := startRelay(ctx, n, acquire)
		b.Cleanup(func() { r.stop(b) })
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return r
	}
	elections := make([]*lease.Election, n)
	locks := make([]*lease.Client, n)
	fleet(b, n, eps, func(i int, cli *clientv3.Client) (func(), error) {
		c, err := lease.New(cli, lease.WithPrefix("election-bench/"))
		if err != nil {
			return nil, err
		}
		locks[i] = c
		elections[i], err = c.Election("leader")
		return func() { c.Close() }, err
	})
	sessions := make([]*concurrency.Session, n)
	fleet(b, n, eps, func(i int, cli *clientv3.Client) (func(), error) {
		s, err := concurrency.NewSession(cli)
		sessions[i] = s
		if err != nil {
			return nil, err
		}
		return func() { s.Close() }, nil
	})
	fk := relayOf("fencekit", func(ctx context.Context, i int) (func() error, error) {
		t, err := elections[i].Campaign(ctx, "candidate-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		return func() error { return t.Release(context.Background()) }, nil
	})
	em := relayOf("etcdelection", func(ctx context.Context, i int) (func() error, error) {
		e := concurrency.NewElection(sessions[i], "election-bench-etcd/leader")
		if err := e.Campaign(ctx, "candidate-"+strconv.Itoa(i)); err != nil {
			return nil, err
		}
		return func() error { return e.Resign(context.Background()) }, nil
	})
	lk := relayOf("lock", func(ctx context.Context, i int) (func() error, error) {
		l, err := locks[i].Acquire(ctx, "lock")
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(context.Background()) }, nil
	})
	b.Run("resign", func(b *testing.B) {
		interleave(b, plan{rounds: 12, ops: 20, warmup: 20}, []arm{
			{"fencekit", fk.block},
			{"etcdelection", em.block},
			{"lock", lk.block},
		}, [][2]string{{"fencekit", "lock"}, {"etcdelection", "fencekit"}})
	})
}

// BenchmarkObserve is the time from a leader's Proclaim to an observer on
// another connection seeing the new value: fencekit's Election.Observe
// against etcd's concurrency.Election.Observe, interleaved.
func BenchmarkObserve(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	leader := benchLocks(b, benchClient(b, eps...), lease.WithPrefix("observe-bench/"))
	e, err := leader.Election("leader")
	if err != nil {
		b.Fatal(err)
	}
	term, err := e.Campaign(ctx, "v0")
	if err != nil {
		b.Fatal(err)
	}
	watcher, err := benchLocks(b, benchClient(b, eps...), lease.WithPrefix("observe-bench/")).Election("leader")
	if err != nil {
		b.Fatal(err)
	}
	fkSeen := make(chan string, 64)
	go func() {
		for l := range watcher.Observe(ctx) {
			fkSeen <- l.Value
		}
	}()

	s, err := concurrency.NewSession(benchClient(b, eps...))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ee := concurrency.NewElection(s, "observe-bench-etcd/leader")
	if err := ee.Campaign(ctx, "v0"); err != nil {
		b.Fatal(err)
	}
	os, err := concurrency.NewSession(benchClient(b, eps...))
	if err != nil {
		b.Fatal(err)
	}
	defer os.Close()
	emSeen := make(chan string, 64)
	go func() {
		for resp := range concurrency.NewElection(os, "observe-bench-etcd/leader").Observe(ctx) {
			if len(resp.Kvs) > 0 {
				emSeen <- string(resp.Kvs[0].Value)
			}
		}
	}()

	await := func(seen <-chan string, want string) error {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case v := <-seen:
				if v == want {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("observer did not see %q", want)
			}
		}
	}
	i := 0
	b.Run("proclaim", func(b *testing.B) {
		interleave(b, plan{rounds: 20, ops: 25, warmup: 25}, []arm{
			{"fencekit", loop(func() error {
				i++
				v := "v" + strconv.Itoa(i)
				if err := term.Proclaim(ctx, v); err != nil {
					return err
				}
				return await(fkSeen, v)
			})},
			{"etcdelection", loop(func() error {
				i++
				v := "v" + strconv.Itoa(i)
				if err := ee.Proclaim(ctx, v); err != nil {
					return err
				}
				return await(emSeen, v)
			})},
		}, [][2]string{{"fencekit", "etcdelection"}})
	})
}
