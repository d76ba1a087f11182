package sqlguard_test

import (
	"context"
	"errors"
	"github.com/fencekit/fencekit/fence"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
)

// The whole story with real leases: A's etcd traffic is partitioned, its 1s
// lease is lost and Done fires; B acquires and commits an UPDATE; A, still
// believing nothing, sends its UPDATE with its old token and the database
// refuses it with ErrStale; B's row is intact.
func TestLeaseEndToEnd(t *testing.T) {
	cluster := etcdtest.Start(t)
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			e := newEnv(t, be)
			ctx := context.Background()
			accounts := e.table("accounts", "id KEY, owner TEXT, balance BIGINT NOT NULL")
			e.exec("INSERT INTO " + accounts + " (id, owner, balance) VALUES ('alice', 'nobody', 100)")

			proxy, err := faultproxy.New(strings.TrimPrefix(cluster.Members[0].ClientURL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			locksA, err := lease.New(etcdtest.Client(t, cluster, proxy.URL()), lease.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer locksA.Close()
			locksB, err := lease.New(etcdtest.Client(t, cluster), lease.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer locksB.Close()

			name := "accounts-" + e.prefix
			write := func(l *lease.Lease, who string, amount int) error {
				return e.g.RunTx(ctx, e.db, nil, l.Fence(), []string{"account/alice"}, func(ctx context.Context, tx *testTx) error {
					_, err := tx.ExecContext(ctx, "UPDATE "+accounts+" SET owner = "+e.ph(1)+", balance = balance + "+e.ph(2)+
						" WHERE id = 'alice'", who, amount)
					return err
				})
			}

			a, err := locksA.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := write(a, "A", 1); err != nil {
				t.Fatalf("A's write while it holds the lease: %v", err)
			}

			proxy.Pause() // A can no longer renew
			select {
			case <-a.Done():
				t.Logf("A lost its lease: %v", a.Err())
			case <-time.After(10 * time.Second):
				t.Fatal("A's Done did not fire")
			}

			acqCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			b, err := locksB.Acquire(acqCtx, name)
			if err != nil {
				t.Fatalf("B acquire: %v", err)
			}
			if b.Fence().Revision <= a.Fence().Revision {
				t.Fatalf("B's token %v is not newer than A's %v", b.Fence(), a.Fence())
			}
			if err := write(b, "B", 10); err != nil {
				t.Fatalf("B's write: %v", err)
			}

			// A wakes up late and writes with its old token.
			err = write(a, "A", 1000)
			var se *fence.RefusedError
			if !errors.As(err, &se) || se.Token != a.Fence() || se.Mark != b.Fence() {
				t.Fatalf("A's late write: got %v, want *StaleError with B's token as the mark", err)
			}

			var owner string
			var balance int64
			if err := e.db.QueryRow("SELECT owner, balance FROM "+accounts+" WHERE id = 'alice'").Scan(&owner, &balance); err != nil {
				t.Fatal(err)
			}
			if owner != "B" || balance != 111 {
				t.Fatalf("row after A's late write: owner %q balance %d, want B 111", owner, balance)
			}
			if err := b.Release(ctx); err != nil {
				t.Errorf("B release: %v", err)
			}
			proxy.Resume()
		})
	}
}
