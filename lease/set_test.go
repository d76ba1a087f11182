package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// One transaction writes every record of a set: all carry one creation
// revision, each a normal fencing token of its lock; Release removes them
// all.
func TestAcquireAllOneRevision(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)

	set, err := c.AcquireAll(ctx, []string{"acct-1", "acct-2", "acct-3"})
	require.NoError(t, err)
	assert.Equal(t, []string{"acct-1", "acct-2", "acct-3"}, set.Names())
	for _, name := range set.Names() {
		keys := records(t, cli, name)
		require.Len(t, keys, 1, name)
		resp, err := cli.Get(ctx, keys[0])
		require.NoError(t, err)
		assert.Equal(t, set.Revision(), resp.Kvs[0].CreateRevision, name)
		assert.Equal(t, set.Revision(), set.Fence(name).Revision)
		assert.Equal(t, name, set.Fence(name).Lock)
		assert.Equal(t, set.Fence(name), set.Lease(name).Fence())
	}
	for i, f := range set.Fences() {
		assert.Equal(t, set.Fence(set.Names()[i]), f)
	}
	require.NoError(t, set.Renew(ctx))
	assert.Nil(t, set.Lease("acct-9"))
	assert.True(t, set.Fence("acct-9").IsZero())
	assert.NoError(t, set.Err())

	require.NoError(t, set.Release(ctx))
	<-set.Done()
	require.ErrorIs(t, set.Err(), lease.ErrReleased)
	for _, name := range set.Names() {
		assert.Empty(t, records(t, cli, name), name)
	}
	require.ErrorIs(t, set.Release(ctx), lease.ErrNotFound, "released already, as for a Lease")
}

// Bad sets are refused with typed errors before anything is written.
func TestAcquireAllRefusesBadSets(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	many := make([]string, lease.MaxSetSize+1)
	for i := range many {
		many[i] = fmt.Sprint("m", i)
	}
	for _, tc := range []struct {
		name  string
		names []string
		want  error
	}{
		{"empty", nil, lease.ErrInvalidSet},
		{"duplicate", []string{"x", "y", "x"}, lease.ErrInvalidSet},
		{"too many", many, lease.ErrInvalidSet},
		{"invalid name", []string{"x", "a/b"}, lease.ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AcquireAll(ctx, tc.names)
			require.ErrorIs(t, err, tc.want)
			require.NotErrorIs(t, err, lease.ErrRetryable)
			_, err = c.TryAcquireAll(ctx, tc.names)
			require.ErrorIs(t, err, tc.want)
		})
	}
	resp, err := cli.Get(ctx, lease.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count, "nothing written")
	set, err := c.AcquireAll(ctx, many[:lease.MaxSetSize])
	require.NoError(t, err, "MaxSetSize locks fit etcd's default transaction limit")
	require.NoError(t, set.Release(ctx))
}

// A set queues in each lock's FIFO order with plain acquisitions: it waits
// behind a holder of one of its locks, and a plain Acquire that came after
// it waits behind it.
func TestAcquireAllQueuesInOrder(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	holder, err := newClient(t, cli).Acquire(ctx, "a")
	require.NoError(t, err)

	setc := make(chan *lease.Set, 1)
	go func() {
		set, err := newClient(t, cli).AcquireAll(ctx, []string{"a", "b"})
		assert.NoError(t, err)
		setc <- set
	}()
	waitRecords(t, cli, "a", 2)
	waitRecords(t, cli, "b", 1)
	later := make(chan *lease.Lease, 1)
	go func() {
		l, err := newClient(t, cli).Acquire(ctx, "b")
		assert.NoError(t, err)
		later <- l
	}()
	waitRecords(t, cli, "b", 2)
	select {
	case <-setc:
		t.Fatal("the set was admitted while a holder held one of its locks")
	case <-later:
		t.Fatal("a later Acquire of b overtook the set")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, holder.Release(ctx))
	set := <-setc
	require.NotNil(t, set)
	assert.Greater(t, set.Revision(), holder.Fence().Revision)
	select {
	case <-later:
		t.Fatal("the later Acquire of b was admitted while the set held b")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, set.Release(ctx))
	l := <-later
	require.NotNil(t, l)
	assert.Greater(t, l.Fence().Revision, set.Revision())
	require.NoError(t, l.Release(ctx))
}

// Sets that overlap, taken in every order by many Clients at once, never
// deadlock and never share a lock.
func TestAcquireAllNoDeadlock(t *testing.T) {
	cl := etcdtest.Start(t)
	ctx := ctxT(t, 90*time.Second)
	locks := []string{"l0", "l1", "l2", "l3", "l4"}
	var mu sync.Mutex
	holders := map[string]int{}
	const workers, rounds = 6, 15
	var wg sync.WaitGroup
	for w := range workers {
		c := newClient(t, etcdtest.Client(t, cl))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				names := append([]string(nil), locks...)
				rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
				names = names[:2+rng.IntN(3)]
				set, err := c.AcquireAll(ctx, names)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				for _, n := range names {
					holders[n]++
					assert.Equal(t, 1, holders[n], "two holders of %s", n)
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				mu.Lock()
				for _, n := range names {
					holders[n]--
				}
				mu.Unlock()
				assert.NoError(t, set.Release(ctx))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the sets did not all complete: deadlock?")
}

// TryAcquireAll takes all or nothing at once: with one lock held it fails
// with ErrHeld and leaves the other locks free.
func TestTryAcquireAll(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	set, err := c.TryAcquireAll(ctx, []string{"t1", "t2"})
	require.NoError(t, err)
	require.NoError(t, set.Release(ctx))

	held, err := newClient(t, cli).Acquire(ctx, "t2")
	require.NoError(t, err)
	_, err = c.TryAcquireAll(ctx, []string{"t1", "t2", "t3"})
	require.ErrorIs(t, err, lease.ErrHeld)
	require.Eventually(t, func() bool {
		return len(records(t, cli, "t1")) == 0 && len(records(t, cli, "t3")) == 0 && len(records(t, cli, "t2")) == 1
	}, 5*time.Second, 10*time.Millisecond, "the set's records are removed")
	l, err := newClient(t, cli).TryAcquire(ctx, "t1")
	require.NoError(t, err, "t1 is free again")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, held.Release(ctx))
}

// A set that cannot be completed in time holds nothing afterwards: the lock
// it was admitted to is released, and its other records are removed.
func TestAcquireAllTimeoutLeavesNothing(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	held, err := newClient(t, cli).Acquire(ctx, "busy")
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = newClient(t, cli).AcquireAll(short, []string{"free", "busy"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool {
		return len(records(t, cli, "free")) == 0 && len(records(t, cli, "busy")) == 1
	}, 5*time.Second, 10*time.Millisecond)
	l, err := newClient(t, cli).TryAcquire(ctx, "free")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, held.Release(ctx))
}

// The set ends when one of its leases is lost, with that loss as its Err.
func TestAcquireAllLossEndsTheSet(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	set, err := newClient(t, cli).AcquireAll(ctx, []string{"s1", "s2"})
	require.NoError(t, err)
	wctx, cancel := set.Context(ctx)
	defer cancel()
	assert.Equal(t, set.Fences(), fence.TokensFromContext(wctx), "the set's context carries its tokens")
	_, err = cli.Delete(ctx, records(t, cli, "s2")[0])
	require.NoError(t, err)
	select {
	case <-set.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the set did not end when one of its records was deleted")
	}
	require.ErrorIs(t, set.Err(), lease.ErrKeyDeleted)
	var lost *lease.LostError
	require.ErrorAs(t, set.Err(), &lost)
	assert.Equal(t, "s2", lost.Lock, "the cause names the lock")
	<-wctx.Done()
	require.ErrorIs(t, context.Cause(wctx), lease.ErrKeyDeleted)
	require.NoError(t, set.Lease("s1").Err(), "the other lease is still held until released")
	err = set.Release(ctx)
	require.Error(t, err, "the lost lease's Release reports the loss")
	assert.Empty(t, records(t, cli, "s1"))
}

// A set write whose reply is lost is sent again and finds its records:
// each lock has the set's one record, written once.
func TestAcquireAllLostReply(t *testing.T) {
	px := newProxied(t)
	ctx := ctxT(t, 20*time.Second)
	warm, err := px.c.Acquire(ctx, "warm") // the session exists
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	px.p.DropReplies()
	got := make(chan error, 1)
	var set *lease.Set
	go func() {
		var err error
		set, err = px.c.AcquireAll(ctx, []string{"r1", "r2"})
		got <- err
	}()
	require.Eventually(t, func() bool {
		return len(records(t, px.direct, "r1")) == 1 && len(records(t, px.direct, "r2")) == 1
	}, 5*time.Second, 5*time.Millisecond, "the write applied; its reply is dropped")
	time.Sleep(100 * time.Millisecond)
	px.p.Resume()
	px.p.ResetConns()
	require.NoError(t, <-got)
	for _, name := range []string{"r1", "r2"} {
		keys := records(t, px.direct, name)
		require.Len(t, keys, 1)
		resp, err := px.direct.Get(ctx, keys[0])
		require.NoError(t, err)
		assert.Equal(t, set.Revision(), resp.Kvs[0].CreateRevision)
		assert.Equal(t, int64(1), resp.Kvs[0].Version, "written once")
		assert.True(t, strings.HasSuffix(string(resp.Kvs[0].Value), "#1"))
	}
	require.NoError(t, set.Release(ctx))
}

// A set Release whose reply is lost reports the outcome unknown; its retry
// finds the records gone and returns nil, as Lease.Release does, and the
// leases end released.
func TestSetReleaseLostReply(t *testing.T) {
	px := newProxied(t)
	ctx := ctxT(t, 20*time.Second)
	set, err := px.c.AcquireAll(ctx, []string{"u1", "u2", "u3"})
	require.NoError(t, err)
	px.lostReply(t, set.Release)
	require.Eventually(t, func() bool {
		return len(records(t, px.direct, "u1"))+len(records(t, px.direct, "u2"))+len(records(t, px.direct, "u3")) == 0
	}, 5*time.Second, 10*time.Millisecond, "the lost Release applied")
	require.NoError(t, until(t, ctx, set.Release))
	<-set.Done()
	for _, l := range set.Leases() {
		require.ErrorIs(t, l.Err(), lease.ErrReleased, l.Name())
	}
}

// A set partitioned away from etcd loses every one of its locks before
// anyone else is admitted to any of them.
func TestAcquireAllPartitionedLosesAllFirst(t *testing.T) {
	px := newProxied(t, lease.WithTTL(time.Second))
	ctx := ctxT(t, 20*time.Second)
	set, err := px.c.AcquireAll(ctx, []string{"q1", "q2", "q3"})
	require.NoError(t, err)
	ended := make([]time.Time, 3)
	var wg sync.WaitGroup
	for i, l := range set.Leases() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-l.Done()
			ended[i] = time.Now()
		}()
	}
	type result struct {
		at  time.Time
		set *lease.Set
		err error
	}
	next := make(chan result, 1)
	go func() {
		s, err := newClient(t, px.direct).AcquireAll(ctx, []string{"q3", "q1"})
		next <- result{time.Now(), s, err}
	}()
	waitRecords(t, px.direct, "q1", 2)
	px.p.Blackhole()
	r := <-next
	require.NoError(t, r.err)
	admitted := r.at
	wg.Wait()
	require.NoError(t, r.set.Release(ctx))
	for i, at := range ended {
		assert.True(t, at.Before(admitted), "lease %d of the set ended %v after the successor was admitted", i, at.Sub(admitted))
		require.ErrorIs(t, set.Leases()[i].Err(), lease.ErrLost)
	}
	<-set.Done()
	px.p.Resume()
}

// A set's tokens fit in one request: guard and grpcguard carry at most
// fence.MaxTokens.
func TestMaxSetSizeFitsFenceMaxTokens(t *testing.T) {
	assert.LessOrEqual(t, lease.MaxSetSize, fence.MaxTokens)
}

// A TryAcquireAll that fails with ErrHeld has removed every record it
// wrote by the time it returns: right after the call, the only record
// under the lock directories is the holder's.
func TestTryAcquireAllHeldLeavesNothingOnReturn(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 60*time.Second)
	a := newClient(t, cli)
	held, err := newClient(t, cli).Acquire(ctx, "ly")
	require.NoError(t, err)
	holderKey, holderLease := heldRecord(t, cli, "ly")
	for round := range 10 {
		_, err := a.TryAcquireAll(ctx, []string{"lx", "ly", "lz"})
		require.ErrorIs(t, err, lease.ErrHeld, "round %d", round)
		require.NotErrorIs(t, err, lease.ErrLeftBehind, "round %d", round)
		require.Empty(t, keysBut(t, cli, holderKey, holderLease),
			"round %d: records of the failed TryAcquireAll still in etcd after it returned", round)
	}
	require.NoError(t, held.Release(ctx))
}

// keysBut returns every key under the lock directories (the default
// prefix) except the record at key attached to the session lease id.
func keysBut(t *testing.T, cli *clientv3.Client, key string, id clientv3.LeaseID) []string {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 5*time.Second), lease.DefaultPrefix, clientv3.WithPrefix())
	require.NoError(t, err)
	var others []string
	for _, kv := range resp.Kvs {
		if string(kv.Key) != key || clientv3.LeaseID(kv.Lease) != id {
			others = append(others, string(kv.Key))
		}
	}
	return others
}

// After a TryAcquireAll failed on a held lock and the holder released it,
// the lock is free at once: a third client's TryAcquire succeeds with no
// pause, as no one holds or waits for it.
func TestTryAcquireAllFreedLockIsFreeAtOnce(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 60*time.Second)
	a, b, c := newClient(t, cli), newClient(t, cli), newClient(t, cli)
	for round := range 100 {
		held, err := b.Acquire(ctx, "fy")
		require.NoError(t, err, "round %d", round)
		_, err = a.TryAcquireAll(ctx, []string{"fx", "fy"})
		require.ErrorIs(t, err, lease.ErrHeld, "round %d", round)
		require.NoError(t, held.Release(ctx), "round %d", round)
		l, err := c.TryAcquire(ctx, "fy")
		require.NoError(t, err, "round %d: y was released and nobody waits for it", round)
		require.NoError(t, l.Release(ctx), "round %d", round)
	}
}

// A failed TryAcquireAll whose deletes get no reply says so: the error
// still matches ErrHeld, and is a *LeftBehindError naming the locks whose
// records may remain, which the Client then deletes in the background. One
// whose first delete applied but lost its reply sends it again, finds the
// records gone and returns plain ErrHeld.
func TestTryAcquireAllLostDeleteReply(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	ctx := ctxT(t, 60*time.Second)
	held, err := newClient(t, direct).Acquire(ctx, "dy")
	require.NoError(t, err)
	holderKey, holderLease := heldRecord(t, direct, "dy")
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			cli := etcdtest.Client(t, cl)
			kv := &deleteLossKV{KV: cli.KV, applied: applied}
			cli.KV = kv
			a := newClient(t, cli)
			kv.drop.Store(1)
			if !applied {
				kv.drop.Store(1 << 20) // every try
			}
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := a.TryAcquireAll(tctx, []string{"dx", "dy"})
			require.ErrorIs(t, err, lease.ErrHeld)
			require.NotErrorIs(t, err, lease.ErrRetryable)
			if applied {
				require.NotErrorIs(t, err, lease.ErrLeftBehind)
				require.Empty(t, keysBut(t, direct, holderKey, holderLease), "the resend found the records gone")
				return
			}
			require.ErrorIs(t, err, lease.ErrLeftBehind)
			require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
			var left *lease.LeftBehindError
			require.ErrorAs(t, err, &left)
			assert.Equal(t, []string{"dx", "dy"}, left.Locks)
			require.ErrorIs(t, left.Err, lease.ErrHeld)
			kv.drop.Store(0)
			require.Eventually(t, func() bool { return len(keysBut(t, direct, holderKey, holderLease)) == 0 },
				10*time.Second, 10*time.Millisecond, "the background clean-up deletes the records")
		})
	}
	require.NoError(t, held.Release(ctx))
}

// deleteLossKV loses the replies (or the requests, unless applied) of the
// next drop transactions that delete records of a failed try: those whose
// Then branch holds transactions.
type deleteLossKV struct {
	clientv3.KV
	drop    atomic.Int32
	applied bool
}

func (k *deleteLossKV) Txn(ctx context.Context) clientv3.Txn {
	return &deleteLossTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type deleteLossTxn struct {
	clientv3.Txn
	kv     *deleteLossKV
	nested bool
}

func (t *deleteLossTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *deleteLossTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *deleteLossTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.nested = t.nested || op.IsTxn()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *deleteLossTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.nested || t.kv.drop.Add(-1) < 0 {
		return t.Txn.Commit()
	}
	if t.kv.applied {
		if _, err := t.Txn.Commit(); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("reply lost (test)")
}

// A set takes Acquire's options, each for every lock of it: metadata
// stored with each record, a maximum hold that ends the set, and a
// lock-delay that every lock of the set waits out after the cap dropped
// its record. Invalid options, and a set too large for its markers, fail
// before anything is written.
func TestAcquireAllOptions(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, cli)

	_, err := c.AcquireAll(ctx, []string{"o1", "o2"}, lease.WithLockDelay(0))
	require.ErrorIs(t, err, lease.ErrInvalidOption)
	_, err = c.TryAcquireAll(ctx, []string{"o1", "o2"}, lease.WithMetadata("bad\n"))
	require.ErrorIs(t, err, lease.ErrInvalidOption)
	many := make([]string, lease.MaxDelayedSetSize+1)
	for i := range many {
		many[i] = fmt.Sprintf("o-many-%d", i)
	}
	_, err = c.AcquireAll(ctx, many, lease.WithLockDelay(time.Second))
	require.ErrorIs(t, err, lease.ErrInvalidSet)
	assert.Empty(t, keysBut(t, cli, "", 0), "nothing was written")

	set, err := c.AcquireAll(ctx, []string{"o1", "o2"}, lease.WithMetadata("transfer 9001"),
		lease.WithMaxHold(300*time.Millisecond), lease.WithLockDelay(testDelay))
	require.NoError(t, err)
	gone := make([]<-chan time.Time, 2)
	for i, l := range set.Leases() {
		assert.Equal(t, "transfer 9001", l.Metadata(), l.Name())
		st, err := newAdmin(t, cli).Inspect(ctx, l.Name())
		require.NoError(t, err)
		require.NotNil(t, st.Holder)
		assert.Equal(t, testDelay, st.Holder.LockDelay, l.Name())
		gone[i] = deleteSeen(t, ctx, cli, st.Holder.Key)
	}
	next := []<-chan time.Time{acquireLater(ctx, t, newClient(t, cli), "o1"), acquireLater(ctx, t, newClient(t, cli), "o2")}
	<-set.Done()
	require.ErrorIs(t, set.Err(), lease.ErrMaxHold)
	for i := range next {
		dropped := <-gone[i]
		waited := (<-next[i]).Sub(dropped)
		t.Logf("lock %d of the set: successor admitted %v after the capped record was deleted", i, waited)
		assert.GreaterOrEqual(t, waited, testDelay)
	}
}

// A TryAcquireAll with a lock-delay that finds a lock held removes its
// records and their markers before it returns.
func TestTryAcquireAllWithLockDelayLeavesNothing(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	held, err := newClient(t, cli).Acquire(ctx, "my")
	require.NoError(t, err)
	holderKey, holderLease := heldRecord(t, cli, "my")
	a := newClient(t, cli)
	for round := range 3 {
		_, err := a.TryAcquireAll(ctx, []string{"mx", "my"}, lease.WithLockDelay(time.Second))
		require.ErrorIs(t, err, lease.ErrHeld, "round %d", round)
		require.Empty(t, keysBut(t, cli, holderKey, holderLease), "round %d: records or markers left", round)
	}
	require.NoError(t, held.Release(ctx))
	set, err := a.TryAcquireAll(ctx, []string{"mx", "my"}, lease.WithLockDelay(time.Second))
	require.NoError(t, err)
	require.NoError(t, set.Release(ctx))
	assert.Empty(t, keysBut(t, cli, "", 0), "a Release deletes the markers: no delay")
}
