package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// txnShape is what one transaction sent through a txnSpy asked and got.
type txnShape struct {
	cmps, then, orElse int
	writes             bool // a put in either branch
	succeeded          bool
}

// txnSpy records the shape of every transaction sent through the real KV
// it wraps.
type txnSpy struct {
	clientv3.KV
	mu   sync.Mutex
	txns []txnShape
}

func spyOn(cli *clientv3.Client) *txnSpy {
	s := &txnSpy{KV: cli.KV}
	cli.KV = s
	return s
}

// writes returns the transactions with a put sent since the last call.
func (s *txnSpy) writes() []txnShape {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w []txnShape
	for _, t := range s.txns {
		if t.writes {
			w = append(w, t)
		}
	}
	s.txns = nil
	return w
}

func (s *txnSpy) Txn(ctx context.Context) clientv3.Txn {
	return &spiedTxn{Txn: s.KV.Txn(ctx), spy: s}
}

type spiedTxn struct {
	clientv3.Txn
	spy   *txnSpy
	shape txnShape
}

func (t *spiedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.shape.cmps = len(cs)
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *spiedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.shape.then = len(ops)
	t.shape.writes = t.shape.writes || hasPut(ops)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *spiedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.shape.orElse = len(ops)
	t.shape.writes = t.shape.writes || hasPut(ops)
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *spiedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	t.shape.succeeded = err == nil && resp.Succeeded
	t.spy.mu.Lock()
	t.spy.txns = append(t.spy.txns, t.shape)
	t.spy.mu.Unlock()
	return resp, err
}

func hasPut(ops []clientv3.Op) bool {
	for _, op := range ops {
		if op.IsPut() {
			return true
		}
	}
	return false
}

// An acquisition of a free lock is one write that reads nothing; one of a
// taken lock queues behind its holder (a failed write, then the write
// that reads the queue) and is admitted in order; the Client then writes
// that lock the queueing way, without the failed attempt, until it finds
// it free again.
func TestWriteReadsTheQueueOnlyWhenTaken(t *testing.T) {
	onMembers(t, func(t *testing.T, cl *etcdtest.Cluster, member func(int) string) {
		ctx := ctxT(t, 30*time.Second)
		holder := newClient(t, etcdtest.Client(t, cl, member(0)))
		cli := etcdtest.Client(t, cl, member(1))
		spy := spyOn(cli)
		c := newClient(t, cli)

		cycle := func() {
			t.Helper()
			l, err := c.Acquire(ctx, "shape")
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		free := txnShape{cmps: 1, then: 1, writes: true, succeeded: true}
		queued := txnShape{cmps: 1, then: 2, writes: true, succeeded: true}

		cycle()
		spy.writes() // the session's first acquisition
		cycle()
		assert.Equal(t, []txnShape{free}, spy.writes(), "a free lock: one write, no read")

		// Taken: the write into what looked free fails, the queueing write
		// follows, and the waiter is admitted when the holder releases.
		waitBehind := func() {
			t.Helper()
			h, err := holder.Acquire(ctx, "shape")
			require.NoError(t, err)
			got := make(chan *lease.Lease, 1)
			go func() {
				l, err := c.Acquire(ctx, "shape")
				assert.NoError(t, err)
				got <- l
			}()
			waitRecords(t, cli, "shape", 2)
			require.NoError(t, h.Release(ctx))
			l := <-got
			require.NotNil(t, l)
			assert.Greater(t, l.Fence().Revision, h.Fence().Revision)
			require.NoError(t, l.Release(ctx))
		}
		waitBehind()
		assert.Equal(t, []txnShape{{cmps: 1, then: 1, writes: true}, queued}, spy.writes(),
			"a taken lock: the failed write, then the queueing one")
		waitBehind()
		assert.Equal(t, []txnShape{queued}, spy.writes(), "a lock seen taken: the queueing write only")

		// Free again: the queueing write finds no one, and the next
		// acquisition writes the free way.
		cycle()
		assert.Equal(t, []txnShape{queued}, spy.writes())
		cycle()
		assert.Equal(t, []txnShape{free}, spy.writes())
		assert.Empty(t, records(t, cli, "shape"))
	})
}

// A write into a free lock whose reply is lost is retried: the retry finds
// the directory holding the acquisition's own record, reads it, and the
// acquisition holds the lock with that record, written once.
func TestLostReplyToFreeLockWriteIsRecognised(t *testing.T) {
	px := newProxied(t)
	p, direct, c := px.p, px.direct, px.c
	ctx := ctxT(t, 30*time.Second)
	warm, err := c.Acquire(ctx, "warm") // the session, granted before the fault
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	p.DropReplies()
	got := make(chan *lease.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "lost-write")
		assert.NoError(t, err)
		got <- l
	}()
	waitRecords(t, direct, "lost-write", 1) // written; the reply swallowed
	p.Resume()
	p.ResetConns() // the write fails on the client side: its outcome unknown
	l := <-got
	require.NotNil(t, l)
	key, _ := heldRecord(t, direct, "lost-write")
	resp, err := direct.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, resp.Kvs[0].CreateRevision, l.Fence().Revision, "the lease is the record written before the reply was lost")
	assert.Equal(t, int64(1), resp.Kvs[0].Version, "written once")
	require.NoError(t, l.Release(ctx))
	assert.Empty(t, records(t, direct, "lost-write"))
}
