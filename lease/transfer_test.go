package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// campaigner campaigns in a goroutine; terms delivers its term or error.
type campaigner struct {
	value string
	terms chan *lease.Term
	errs  chan error
}

func campaignLater(ctx context.Context, t *testing.T, c *lease.Client, name, value string) *campaigner {
	t.Helper()
	e, err := c.Election(name)
	require.NoError(t, err)
	cg := &campaigner{value: value, terms: make(chan *lease.Term, 1), errs: make(chan error, 1)}
	go func() {
		term, err := e.Campaign(ctx, value)
		if err != nil {
			cg.errs <- err
			return
		}
		cg.terms <- term
	}()
	return cg
}

func (cg *campaigner) term(t *testing.T, d time.Duration) *lease.Term {
	t.Helper()
	select {
	case term := <-cg.terms:
		return term
	case err := <-cg.errs:
		t.Fatalf("%s: campaign: %v", cg.value, err)
	case <-time.After(d):
		t.Fatalf("%s: not leading after %v", cg.value, d)
	}
	return nil
}

func (cg *campaigner) notLeading(t *testing.T) {
	t.Helper()
	select {
	case term := <-cg.terms:
		t.Fatalf("%s leads (%v) out of turn", cg.value, term)
	case err := <-cg.errs:
		t.Fatalf("%s: campaign: %v", cg.value, err)
	default:
	}
}

// snapshot is every key under the prefix, with its revisions and value.
func snapshot(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 5*time.Second), lease.DefaultPrefix, clientv3.WithPrefix())
	require.NoError(t, err)
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%s c=%d m=%d v=%q", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Value))
	}
	return out
}

// A leader hands its term to the third of four candidates: the leader's
// term ends with ErrTransferred before anything is sent, the chosen one
// leads next with a higher term, the one passed over queues again and
// leads after the last one, with a higher term still; Campaign returns
// no error to it.
func TestTransferPassesOverAndRequeues(t *testing.T) {
	cl := etcdtest.Start(t)
	ctx := ctxT(t, 60*time.Second)
	direct := etcdtest.Client(t, cl)
	const name = "handoff"
	cs := make([]*lease.Client, 4)
	for i := range cs {
		cs[i] = newClient(t, etcdtest.Client(t, cl), lease.WithTTL(3*time.Second))
	}
	a := campaignLater(ctx, t, cs[0], name, "a")
	ta := a.term(t, 10*time.Second)
	b := campaignLater(ctx, t, cs[1], name, "b")
	waitRecords(t, direct, name, 2)
	c := campaignLater(ctx, t, cs[2], name, "c")
	waitRecords(t, direct, name, 3)
	d := campaignLater(ctx, t, cs[3], name, "d")
	waitRecords(t, direct, name, 4)

	e, err := cs[0].Election(name)
	require.NoError(t, err)
	cands, err := e.Candidates(ctx)
	require.NoError(t, err)
	require.Len(t, cands, 3)
	assert.Equal(t, []string{"b", "c", "d"}, []string{cands[0].Value, cands[1].Value, cands[2].Value})
	skippedRev := cands[0].Term.Revision

	tctx, tcancel := ta.Context(ctx)
	defer tcancel()
	require.NoError(t, ta.Transfer(ctx, cands[1]))
	assert.True(t, closed(ta.Done()))
	assert.ErrorIs(t, ta.Err(), lease.ErrTransferred)
	assert.ErrorIs(t, ta.Err(), lease.ErrReleased)
	assert.ErrorIs(t, context.Cause(tctx), lease.ErrTransferred)
	assert.ErrorIs(t, ta.Resign(ctx), lease.ErrTransferred, "a transferred term has nothing left to resign")

	tc := c.term(t, 5*time.Second)
	assert.Equal(t, cands[1].Term, tc.Fence(), "the chosen candidate leads with the term it was listed with")
	assert.Greater(t, tc.Fence().Revision, ta.Fence().Revision)
	b.notLeading(t)
	t.Log("transferred")

	// b queued again behind d: d leads next, then b, with a term above
	// everyone's.
	require.Eventually(t, func() bool {
		cands, err := e.Candidates(ctx)
		return err == nil && len(cands) == 2 && cands[0].Value == "d" && cands[1].Value == "b"
	}, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, tc.Resign(ctx))
	td := d.term(t, 5*time.Second)
	require.NoError(t, td.Resign(ctx))
	tb := b.term(t, 5*time.Second)
	t.Log("b leads")
	assert.Greater(t, tb.Fence().Revision, td.Fence().Revision)
	assert.Greater(t, tb.Fence().Revision, skippedRev)
	require.NoError(t, tb.Resign(ctx))

	// The note that passed b over is gone: nothing is left under the
	// prefix.
	require.Eventually(t, func() bool { return len(snapshot(t, direct)) == 0 }, 5*time.Second, 5*time.Millisecond,
		"left behind: %v", snapshot(t, direct))
}

// A Transfer to a candidate that is not waiting (the leader itself, a
// revision that names no record, a candidate gone, another election) is
// refused with a *NotCandidateError and changes nothing: not etcd, not
// the term.
func TestTransferRefusedChangesNothing(t *testing.T) {
	cl := etcdtest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	direct := etcdtest.Client(t, cl)
	const name = "refuse"
	c1 := newClient(t, etcdtest.Client(t, cl))
	c2 := newClient(t, etcdtest.Client(t, cl))
	e1, err := c1.Election(name)
	require.NoError(t, err)
	term, err := e1.Campaign(ctx, "leader")
	require.NoError(t, err)
	wctx, wcancel := context.WithCancel(ctx)
	w := campaignLater(wctx, t, c2, name, "waiting")
	waitRecords(t, direct, name, 2)
	cands, err := e1.Candidates(ctx)
	require.NoError(t, err)
	require.Len(t, cands, 1)
	gone := cands[0]
	wcancel()
	select {
	case err := <-w.errs:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled candidate did not give up")
	}
	waitRecords(t, direct, name, 1)

	before := snapshot(t, direct)
	other := gone
	other.Term.Lock = "elsewhere"
	for _, to := range []lease.Candidate{
		{Term: term.Fence()}, // the leader itself
		{Term: gone.Term},    // gone
		{Term: other.Term},   // another election
		{Term: lease.Candidate{}.Term},
	} {
		err := term.Transfer(ctx, to)
		var nc *lease.NotCandidateError
		require.ErrorAs(t, err, &nc, "to %v", to.Term)
		assert.ErrorIs(t, err, lease.ErrNotCandidate)
		assert.False(t, nc.Resigned)
		assert.Equal(t, to.Term.Revision, nc.Revision)
		assert.NoError(t, term.Err(), "the term goes on")
	}
	assert.Equal(t, before, snapshot(t, direct), "a refused transfer wrote nothing")
	require.NoError(t, term.Resign(ctx))
}

// Run's function may hand the term on; Run then returns its result
// without resigning a term it no longer has.
func TestRunTransfers(t *testing.T) {
	cl := etcdtest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	direct := etcdtest.Client(t, cl)
	const name = "run-handoff"
	c1 := newClient(t, etcdtest.Client(t, cl))
	c2 := newClient(t, etcdtest.Client(t, cl))
	e1, err := c1.Election(name)
	require.NoError(t, err)
	var next *campaigner
	err = e1.Run(ctx, "first", func(rctx context.Context, term *lease.Term) error {
		next = campaignLater(ctx, t, c2, name, "second")
		waitRecords(t, direct, name, 2)
		cands, err := e1.Candidates(ctx)
		if err != nil {
			return err
		}
		if err := term.Transfer(ctx, cands[0]); err != nil {
			return err
		}
		if !errors.Is(context.Cause(rctx), lease.ErrTransferred) {
			return fmt.Errorf("Run's context not cancelled by the transfer: %v", context.Cause(rctx))
		}
		return nil
	})
	require.NoError(t, err)
	t2 := next.term(t, 5*time.Second)
	require.NoError(t, t2.Resign(ctx))
}

// lossyKV drops the replies (or the requests) of the next transactions
// it is armed for (transactions that only read go through): a transfer
// whose reply is lost.
type lossyKV struct {
	clientv3.KV
	drop    atomic.Int32 // transactions left to lose
	applied bool         // lost replies: the transaction applies
}

func (k *lossyKV) Txn(ctx context.Context) clientv3.Txn { return &lossyTxn{Txn: k.KV.Txn(ctx), kv: k} }

type lossyTxn struct {
	clientv3.Txn
	kv     *lossyKV
	writes bool
}

func (t *lossyTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *lossyTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.writes = t.writes || writes(ops)
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *lossyTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

// writes reports whether ops write anything.
func writes(ops []clientv3.Op) bool {
	for _, op := range ops {
		if op.IsPut() || op.IsDelete() {
			return true
		}
	}
	return false
}

func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.writes {
		return t.Txn.Commit()
	}
	if t.kv.drop.Add(-1) < 0 {
		t.kv.drop.Store(0)
		return t.Txn.Commit()
	}
	if t.kv.applied {
		if _, err := t.Txn.Commit(); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("reply lost (test)")
}

// A Transfer whose reply is lost resends its transaction; the resend
// finds the term's record gone and, from its history, that its own lost
// try deleted it, and returns nil: the chosen candidate leads. One whose requests are all lost returns an error matching
// ErrOutcomeUnknown, with the term ended; its record is then deleted in
// the background, and the candidate next in line leads with a higher
// term.
func TestTransferLostReply(t *testing.T) {
	cl := etcdtest.Start(t)
	ctx := ctxT(t, 60*time.Second)
	direct := etcdtest.Client(t, cl)
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			name := fmt.Sprintf("lossy-%v", applied)
			cli := etcdtest.Client(t, cl)
			kv := &lossyKV{KV: cli.KV, applied: applied}
			cli.KV = kv
			leader := newClient(t, cli, lease.WithTTL(2*time.Second))
			e, err := leader.Election(name)
			require.NoError(t, err)
			term, err := e.Campaign(ctx, "leader")
			require.NoError(t, err)
			b := campaignLater(ctx, t, newClient(t, etcdtest.Client(t, cl)), name, "b")
			waitRecords(t, direct, name, 2)
			c := campaignLater(ctx, t, newClient(t, etcdtest.Client(t, cl)), name, "c")
			waitRecords(t, direct, name, 3)
			cands, err := e.Candidates(ctx)
			require.NoError(t, err)
			require.Len(t, cands, 2)

			if applied {
				kv.drop.Store(1)
				require.NoError(t, term.Transfer(ctx, cands[1]))
				assert.ErrorIs(t, term.Err(), lease.ErrTransferred)
				tc := c.term(t, 5*time.Second)
				assert.Equal(t, cands[1].Term, tc.Fence())
				require.NoError(t, tc.Resign(ctx))
				tb := b.term(t, 5*time.Second)
				assert.Greater(t, tb.Fence().Revision, tc.Fence().Revision, "b was passed over and queued again")
				require.NoError(t, tb.Resign(ctx))
				return
			}
			kv.drop.Store(1 << 20)
			tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			err = term.Transfer(tctx, cands[1])
			cancel()
			require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
			assert.ErrorIs(t, term.Err(), lease.ErrTransferred, "the term ended before anything was sent")
			kv.drop.Store(0) // the background delete gets through
			tb := b.term(t, 10*time.Second)
			assert.Greater(t, tb.Fence().Revision, term.Fence().Revision)
			c.notLeading(t)
			require.NoError(t, tb.Resign(ctx))
			tc := c.term(t, 5*time.Second)
			require.NoError(t, tc.Resign(ctx))
		})
	}
}

// Another process asks the leader to hand its term to a chosen candidate:
// Election.Run transfers it by itself (its function's context cancelled
// with ErrTransferred), and the chosen candidate leads. A request naming
// a term that does not lead, or a candidate that does not wait, is
// refused and writes nothing.
func TestRequestTransfer(t *testing.T) {
	cl := etcdtest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	direct := etcdtest.Client(t, cl)
	const name = "asked-handoff"
	c1 := newClient(t, etcdtest.Client(t, cl))
	op := newClient(t, etcdtest.Client(t, cl)) // the operator's process
	e1, err := c1.Election(name)
	require.NoError(t, err)
	eop, err := op.Election(name)
	require.NoError(t, err)

	running := make(chan *lease.Term, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- e1.Run(ctx, "leader", func(rctx context.Context, term *lease.Term) error {
			running <- term
			<-rctx.Done()
			if !errors.Is(context.Cause(rctx), lease.ErrTransferred) {
				return fmt.Errorf("cancelled with %v", context.Cause(rctx))
			}
			return nil
		})
	}()
	term := <-running
	b := campaignLater(ctx, t, newClient(t, etcdtest.Client(t, cl)), name, "b")
	waitRecords(t, direct, name, 2)
	c := campaignLater(ctx, t, newClient(t, etcdtest.Client(t, cl)), name, "c")
	waitRecords(t, direct, name, 3)
	cands, err := eop.Candidates(ctx)
	require.NoError(t, err)
	require.Len(t, cands, 2)

	before := snapshot(t, direct)
	var nh *lease.NotHolderError
	require.ErrorAs(t, eop.RequestTransfer(ctx, cands[0].Term.Revision, cands[1]), &nh)
	assert.Equal(t, term.Fence().Revision, nh.Holder)
	var nc *lease.NotCandidateError
	require.ErrorAs(t, eop.RequestTransfer(ctx, term.Fence().Revision, lease.Candidate{Term: term.Fence()}), &nc)
	require.ErrorAs(t, eop.RequestTransfer(ctx, term.Fence().Revision, lease.Candidate{Term: fence.Token{Lock: name, Revision: cands[1].Term.Revision + 1000}}), &nc)
	assert.Equal(t, before, snapshot(t, direct), "a refused request wrote nothing")

	require.NoError(t, eop.RequestTransfer(ctx, term.Fence().Revision, cands[1]))
	tc := c.term(t, 5*time.Second)
	assert.Equal(t, cands[1].Term, tc.Fence())
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the transfer")
	}
	assert.ErrorIs(t, term.Err(), lease.ErrTransferred)
	got, ok := term.TransferRequested()
	assert.True(t, ok)
	assert.Equal(t, cands[1].Term, got.Term)

	// A term held from Campaign only hears the request; its leader acts.
	b.notLeading(t)
	require.Eventually(t, func() bool {
		cands, err = eop.Candidates(ctx)
		return err == nil && len(cands) == 1
	}, 5*time.Second, 5*time.Millisecond, "b was passed over and queued again")
	require.NoError(t, eop.RequestTransfer(ctx, tc.Fence().Revision, cands[0]))
	select {
	case <-tc.ReleaseRequested():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not hear the request")
	}
	to, ok := tc.TransferRequested()
	require.True(t, ok)
	assert.Equal(t, cands[0].Term, to.Term)
	assert.NoError(t, tc.Err(), "a term from Campaign is not transferred behind its leader's back")
	require.NoError(t, tc.Transfer(ctx, to))
	tb := b.term(t, 5*time.Second)
	assert.Equal(t, cands[0].Term, tb.Fence())
	require.NoError(t, tb.Resign(ctx))
}

// RequestTransfer, like Transfer, refuses a successor that is no waiting
// candidate of the election: a set member (AcquireAll) queued behind the
// leader, a read lock, and a lock-delay marker whose record has gone
// (a waiter with WithLockDelay whose session was revoked). Each is a
// *NotCandidateError; nothing is written, and the term goes on.
func TestRequestTransferRefusesNonCandidates(t *testing.T) {
	cl := etcdtest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	direct := etcdtest.Client(t, cl)
	const name = "not-candidates"
	c1 := newClient(t, etcdtest.Client(t, cl))
	op := newClient(t, etcdtest.Client(t, cl))
	e1, err := c1.Election(name)
	require.NoError(t, err)
	eop, err := op.Election(name)
	require.NoError(t, err)
	term, err := e1.Campaign(ctx, "leader")
	require.NoError(t, err)

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	waiting := make(chan error, 3)
	go func() {
		_, err := newClient(t, etcdtest.Client(t, cl)).AcquireAll(wctx, []string{name, name + "-other"})
		waiting <- err
	}()
	waitRecords(t, direct, name, 2)
	rw, err := newClient(t, etcdtest.Client(t, cl)).RWMutex(name)
	require.NoError(t, err)
	go func() {
		_, err := rw.RLock(wctx)
		waiting <- err
	}()
	waitRecords(t, direct, name, 3)
	// A waiter with a lock-delay whose process is cut off when its
	// session ends: its marker stays for the delay, its record is gone.
	px, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { px.Close() })
	delayed := newClient(t, etcdtest.Client(t, cl, px.URL()))
	go func() {
		_, err := delayed.Acquire(wctx, name, lease.WithLockDelay(5*time.Second))
		waiting <- err
	}()
	waitRecords(t, direct, name, 5) // its record and its marker
	st, err := newAdmin(t, direct).Inspect(ctx, name)
	require.NoError(t, err)
	require.Len(t, st.Waiters, 3)
	setMember, reader, delayedRec := st.Waiters[0], st.Waiters[1], st.Waiters[2]
	require.Equal(t, "read", reader.Kind)
	px.Blackhole()
	_, err = direct.Revoke(ctx, clientv3.LeaseID(delayedRec.Session))
	require.NoError(t, err)
	waitRecords(t, direct, name, 4) // its marker stays, on its own lease
	marker := delayedRec.Fence

	before := snapshot(t, direct)
	tos := []struct {
		what string
		to   fence.Token
	}{{"read lock", reader.Fence}, {"lock-delay marker", marker}, {"set member", setMember.Fence}}
	for _, tc := range tos {
		var nc *lease.NotCandidateError
		err := eop.RequestTransfer(ctx, term.Fence().Revision, lease.Candidate{Term: tc.to})
		if assert.ErrorAs(t, err, &nc, "request to a %s", tc.what) {
			assert.Equal(t, tc.to.Revision, nc.Revision)
		}
	}
	assert.Equal(t, before, snapshot(t, direct), "a refused request wrote nothing")
	for _, tc := range tos {
		var nc *lease.NotCandidateError
		err := term.Transfer(ctx, lease.Candidate{Term: tc.to})
		if assert.ErrorAs(t, err, &nc, "transfer to a %s", tc.what) {
			assert.False(t, nc.Resigned)
		}
		require.NoError(t, term.Err(), "the term goes on")
	}
	assert.Equal(t, before, snapshot(t, direct), "a refused request wrote nothing")
	select {
	case <-term.ReleaseRequested():
		t.Fatal("the leader was asked")
	default:
	}
	wcancel()
	for range 3 {
		assert.Error(t, <-waiting)
	}
	px.Resume()
	px.ResetConns()
	require.NoError(t, term.Resign(ctx))
}

// cutKV cuts its Client's link (cut) just before it sends the first
// transaction that writes once armed: the transaction goes into the cut
// link.
type cutKV struct {
	clientv3.KV
	cut   func()
	armed atomic.Bool
	done  chan struct{} // closed once cut
	tries atomic.Int32  // transactions that write sent since the cut
}

func (k *cutKV) Txn(ctx context.Context) clientv3.Txn { return &cutTxn{Txn: k.KV.Txn(ctx), kv: k} }

type cutTxn struct {
	clientv3.Txn
	kv     *cutKV
	writes bool
}

func (t *cutTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *cutTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.writes = t.writes || writes(ops)
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *cutTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *cutTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.writes && t.kv.armed.CompareAndSwap(true, false) {
		t.kv.cut()
		close(t.kv.done)
	}
	if t.writes && closed(t.kv.done) {
		t.kv.tries.Add(1)
	}
	return t.Txn.Commit()
}

// The leader's link is cut as its term ends (its transfer's transaction
// goes into the cut), its session is revoked, the next in line (a) leads,
// then the link heals: the transfer never applied, and Transfer must not
// report that it did while the chosen candidate (b) still waits. With
// etcd's history at hand it finds out: the term was lost (ErrNotOwner:
// a leads). With that history compacted it cannot tell: the outcome is
// unknown.
func TestTransferLinkCutAsTermEnds(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run(fmt.Sprintf("compacted=%v", compacted), func(t *testing.T) {
			cl := etcdtest.Start(t)
			ctx := ctxT(t, 60*time.Second)
			direct := etcdtest.Client(t, cl)
			const name = "cut-handoff"
			p, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			cli := etcdtest.Client(t, cl, p.URL())
			kv := &cutKV{KV: cli.KV, cut: p.Pause, done: make(chan struct{})}
			cli.KV = kv
			leader := newClient(t, cli, lease.WithTTL(3*time.Second))
			e, err := leader.Election(name)
			require.NoError(t, err)
			term, err := e.Campaign(ctx, "leader")
			require.NoError(t, err)
			a := campaignLater(ctx, t, newClient(t, etcdtest.Client(t, cl)), name, "a")
			waitRecords(t, direct, name, 2)
			b := campaignLater(ctx, t, newClient(t, etcdtest.Client(t, cl)), name, "b")
			waitRecords(t, direct, name, 3)
			cands, err := e.Candidates(ctx)
			require.NoError(t, err)
			require.Len(t, cands, 2)
			st, err := newAdmin(t, direct).Inspect(ctx, name)
			require.NoError(t, err)
			require.Equal(t, term.Fence(), st.Holder.Fence)

			kv.armed.Store(true)
			got := make(chan error, 1)
			go func() { got <- term.Transfer(ctx, cands[1]) }()
			<-kv.done
			_, err = direct.Revoke(ctx, clientv3.LeaseID(st.Holder.Session))
			require.NoError(t, err)
			ta := a.term(t, 10*time.Second)
			// The first try is lost: the link heals under a resend.
			require.Eventually(t, func() bool { return kv.tries.Load() >= 2 }, 5*time.Second, time.Millisecond)
			if compacted {
				resp, err := direct.Get(ctx, "probe")
				require.NoError(t, err)
				_, err = direct.Compact(ctx, resp.Header.Revision)
				require.NoError(t, err)
			}
			p.Resume()

			var terr error
			select {
			case terr = <-got:
			case <-time.After(20 * time.Second):
				t.Fatal("Transfer did not return")
			}
			t.Logf("Transfer: %v", terr)
			require.Error(t, terr, "the transfer never applied: b still waits")
			if compacted {
				assert.ErrorIs(t, terr, lease.ErrOutcomeUnknown)
			} else {
				assert.ErrorIs(t, terr, lease.ErrNotOwner)
				assert.NotErrorIs(t, terr, lease.ErrOutcomeUnknown)
			}
			assert.True(t, closed(term.Done()))
			b.notLeading(t)
			cands, err = e.Candidates(ctx)
			require.NoError(t, err)
			require.Len(t, cands, 1)
			assert.Equal(t, "b", cands[0].Value)
			require.NoError(t, ta.Resign(ctx))
			require.NoError(t, b.term(t, 5*time.Second).Resign(ctx))
		})
	}
}
