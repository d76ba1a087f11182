package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/lease/internal/resend"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxTransferSkip is the most candidates a Transfer may pass over: those
// queued between the leader and the chosen successor. Each costs the
// transfer's transaction two operations (besides its own two), and etcd
// bounds a transaction's operations (128 by default).
const MaxTransferSkip = 50

// Candidate is one candidate waiting in an election's queue, as
// Election.Candidates lists it.
type Candidate struct {
	// Value is the public value the candidate published.
	Value string
	// Term is the term the candidate would lead with: the fencing token
	// of its record (the revision that created it). It names the
	// candidate for Term.Transfer: a revision creates one record of an
	// election, and a candidate that queues again gets another.
	Term fence.Token
}

// NotCandidateError is the error of a Term.Transfer to a candidate that is
// not waiting in the election: it never queued there, it has left, or it
// is the leader itself. It matches ErrNotCandidate. Unless Resigned is
// set, nothing changed: the term goes on.
type NotCandidateError struct {
	// Election is the election's name.
	Election string
	// Revision is the term Transfer was given for the successor.
	Revision int64
	// Reason says why the candidate cannot take over.
	Reason string
	// Resigned reports that the candidate left between Transfer's read of
	// the queue and its transaction, after the term had already ended:
	// Transfer then resigned, and the next candidate in line leads.
	Resigned bool
}

func (e *NotCandidateError) Error() string {
	s := fmt.Sprintf("lease: transfer %q to term %d: %s: %v", e.Election, e.Revision, e.Reason, ErrNotCandidate)
	if e.Resigned {
		s += " (the term had ended: resigned instead)"
	}
	return s
}

// Is reports whether target is ErrNotCandidate.
func (e *NotCandidateError) Is(target error) bool { return target == ErrNotCandidate }

// Candidates returns the candidates waiting in the election, in the order
// in which they would lead, the leader left out (see Leader). It is one
// etcd read. Records of other kinds (a read lock of the same name) are
// left out too.
func (e *Election) Candidates(ctx context.Context) ([]Candidate, error) {
	resp, err := e.c.etcd.Get(ctx, record.Dir(e.c.cfg.prefix, e.name), record.QueueRecords()...)
	if err != nil {
		return nil, opErr("candidates", e.name, errors.Join(record.RPCError(err), ctx.Err()))
	}
	var cs []Candidate
	for i, kv := range resp.Kvs {
		if k, ok := record.KindOf(string(kv.Key)); i == 0 || !ok || k != record.Exclusive {
			continue
		}
		_, _, payload, _ := record.Decode(kv.Value)
		_, value := record.DecodePayload(payload)
		cs = append(cs, Candidate{Value: value, Term: fence.Token{Lock: e.name, Revision: kv.CreateRevision}})
	}
	return cs, nil
}

// Transfer hands the term to the candidate to, which must be waiting in
// the election (see Election.Candidates): to leads next, with a term
// higher than this one, however many candidates queued ahead of it.
//
// The hand-off has no overlap and no gap. Transfer first reads the queue
// and refuses a to that is not a waiting candidate (never queued, gone,
// this leader, a read lock or semaphore permit, a member of a set that
// AcquireAll is taking, a lock-delay marker whose record is gone, or
// queued behind a record of those kinds) with a *NotCandidateError,
// changing nothing. That read also scans the keys under the Client's
// prefix for records sharing to's creation revision (the members of a
// set do), in the same request. Otherwise it ends
// the term (Done closes; Err and the Context's cause are ErrTransferred)
// before it sends anything, and then one transaction, comparing this
// term's owner token and record version as Release does, deletes the
// term's record: to is admitted by that very transaction, so it leads
// within the time its Client takes to hear of it: the transaction also
// leaves to a note under its session's requests (see RequestRelease),
// which that Client watches anyway, so one watch event admits it, without
// a read.
//
// Candidates queued between the leader and to (at most MaxTransferSkip)
// are passed over: the same transaction deletes their records too, and
// leaves each a note saying so, under the prefix's reserved "/skipped/"
// space and attached to the candidate's session. A Campaign (or Acquire)
// whose record a transfer deleted queues again at the tail on its own,
// with a new record and so a higher term than to's; it returns no error
// for that. Terms therefore still only grow, and the candidates not passed
// over keep their order.
//
// Transfer returns nil once the transaction applied. If to left between
// the read and the transaction, the term has already ended: Transfer then
// resigns (the next candidate in line leads) and returns a
// *NotCandidateError with Resigned set. An error matching ErrNotOwner or
// ErrNotFound means the term had been lost already, or was lost (its
// session ended, its record was deleted) before the transaction could
// apply: to was not admitted by it. An error matching ErrOutcomeUnknown
// means Transfer cannot tell whether the transfer applied: no reply came
// (each try is resent for up to one TTL, as Release's are), and if it did
// not apply the Client deletes the term's record in the background,
// comparing its owner token, so that the next candidate leads; or a try's
// reply was lost and the term's record then went while etcd's history,
// which tells whose delete it was (a resend that finds the record gone
// reads it), had been compacted away. Either way the term has ended. A
// term that has ended returns its Err at once.
func (t *Term) Transfer(ctx context.Context, to Candidate) error {
	if t == nil {
		return errNilLease
	}
	return t.l.traced(ctx, opTransfer, func(ctx context.Context) error { return t.l.transfer(ctx, to) })
}

// transferPlan is the transaction of a transfer, as read from the queue.
type transferPlan struct {
	own     *mvccpb.KeyValue   // the term's record
	to      *mvccpb.KeyValue   // the successor's
	skipped []*mvccpb.KeyValue // the records between them
}

// transfer runs Transfer.
func (l *Lease) transfer(ctx context.Context, to Candidate) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if err := l.Err(); err != nil {
		return opErr(opTransfer.String(), l.name, err)
	}
	if to.Term.Lock != l.name {
		return l.notCandidate(to, fmt.Sprintf("a term of election %q", to.Term.Lock), false)
	}
	p, err := l.planTransfer(ctx, to)
	if err != nil {
		return err
	}
	// End the term before anything that could admit the successor is
	// sent: its holder stops before the successor can start.
	if !l.c.recs.startRelease(l) {
		return opErr(opTransfer.String(), l.name, context.Cause(l.fin.Context()))
	}
	l.end(ErrTransferred)
	ended := time.Now()
	err = l.sendTransfer(ctx, to, p)
	if err == nil {
		l.c.met.Result(opTransfer.String(), "done").Inc()
		if l.c.log.Enabled(ctx, slog.LevelInfo) {
			l.c.log.LogAttrs(ctx, slog.LevelInfo, "lease term transferred", append(l.attrs(),
				slog.Int64("successor", to.Term.Revision), slog.Int("skipped", len(p.skipped)),
				slog.Duration("took", time.Since(ended)))...)
		}
	}
	return err
}

// planTransfer reads the queue, checks that this lease heads it and that
// to waits in it, and returns the transfer's plan. It resolves pending
// calls against the record read, and fails (changing nothing in etcd)
// when to is not waiting; when this lease's record is not its own any
// more, the lease is lost.
func (l *Lease) planTransfer(ctx context.Context, to Candidate) (transferPlan, error) {
	q, members, err := l.c.readSuccessor(ctx, record.DirOf(l.key), to.Term.Revision)
	if err != nil {
		return transferPlan{}, opErr(opTransfer.String(), l.name, errors.Join(record.RPCError(err), ctx.Err()))
	}
	own := record.Position(q, l.key, l.rev)
	var rec []*mvccpb.KeyValue
	if own >= 0 {
		rec = q[own : own+1]
	}
	st := l.judge(rec, q)
	if st.err != nil {
		l.lose(st.err)
		return transferPlan{}, opErr(opTransfer.String(), l.name, st.err)
	}
	l.confirm(st.count, st.payload, st.modRev)
	l.pending = nil
	if own != record.LeaderIndex(q) {
		return transferPlan{}, opErr(opTransfer.String(), l.name, errors.New("a record no session keeps heads the queue"))
	}
	ti, skipped, reason := record.Successor(q, own, to.Term.Revision, members, MaxTransferSkip)
	if reason != "" {
		return transferPlan{}, l.notCandidate(to, reason, false)
	}
	return transferPlan{own: q[own], to: q[ti], skipped: skipped}, nil
}

// readSuccessor reads, in one transaction, the queue of the election whose
// directory is dir and, when rev is a revision, every key under the prefix
// created at rev: a set's records (AcquireAll) share their creation
// revision, so a candidate's record is the only record among them.
func (c *Client) readSuccessor(ctx context.Context, dir string, rev int64) (q, members []*mvccpb.KeyValue, err error) {
	ops := []clientv3.Op{clientv3.OpGet(dir, record.QueueRecords()...)}
	if rev > 0 {
		ops = append(ops, clientv3.OpGet(c.cfg.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev)))
	}
	resp, err := c.etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, nil, err
	}
	q = resp.Responses[0].GetResponseRange().Kvs
	if rev > 0 {
		members = resp.Responses[1].GetResponseRange().Kvs
	}
	return q, members, nil
}

// txn is the plan's transaction: if the term's record is as read, to's
// record and each skipped one still exist, delete the term's record and
// the skipped ones, noting each skip.
func (p transferPlan) txn(ctx context.Context, c *Client) clientv3.Txn {
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(string(p.own.Key)), "=", p.own.ModRevision),
		clientv3.Compare(clientv3.Value(string(p.own.Key)), "=", string(p.own.Value)),
		clientv3.Compare(clientv3.CreateRevision(string(p.to.Key)), "=", p.to.CreateRevision),
	}
	// The successor's Client hears of it through its session's watch of
	// requests (see waiter.headed), sooner than by reading the queue.
	ops := []clientv3.Op{clientv3.OpDelete(string(p.own.Key)),
		clientv3.OpPut(record.AskKey(c.cfg.prefix, string(p.to.Key), p.to.CreateRevision), string(p.to.Key)+"\n"+admitNote,
			clientv3.WithLease(clientv3.LeaseID(p.to.Lease)))}
	for _, kv := range p.skipped {
		key := string(kv.Key)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision))
		ops = append(ops, clientv3.OpDelete(key),
			clientv3.OpPut(record.SkipKey(c.cfg.prefix, key, kv.CreateRevision), strconv.FormatInt(p.to.CreateRevision, 10),
				clientv3.WithLease(clientv3.LeaseID(kv.Lease))))
	}
	return c.etcd.Txn(ctx).If(cmps...).Then(ops...)
}

// sendTransfer sends the plan's transaction, resending it while its
// outcome is unknown, and planning it again when a skipped record changed
// under it. The term has ended; the record must go whatever happens.
func (l *Lease) sendTransfer(ctx context.Context, to Candidate, p transferPlan) error {
	r := resend.New(l.sess.ttl, &l.c.lat.change)
	unknownBefore := false
	for attempt := 1; ; attempt++ {
		d := r.Deadline()
		tctx, cancel := context.WithTimeout(ctx, d)
		resp, err := p.txn(tctx, l.c).Commit()
		cancel()
		switch {
		case err == nil && resp.Succeeded:
			l.c.recs.forget(l, true)
			return nil
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
			// Something changed under it: read the queue again.
			next, done, err := l.replan(ctx, to, p, unknownBefore, attempt)
			if done {
				return err
			}
			p = next
			continue
		case errors.Is(record.RPCError(err), ErrPermissionDenied):
			l.giveUpTerm(p)
			return opErr(opTransfer.String(), l.name, record.RPCError(err))
		}
		unknownBefore = true
		if !l.c.again(ctx, r) {
			l.giveUpTerm(p)
			l.c.met.Result(opTransfer.String(), "unknown").Inc()
			return opErr(opTransfer.String(), l.name, unknown(ctx, record.RPCError(err)))
		}
	}
}

// replan reads the queue after the transfer's compare failed, and returns
// the plan to send next, or done and the transfer's result.
func (l *Lease) replan(ctx context.Context, to Candidate, p transferPlan, unknownBefore bool, attempt int) (transferPlan, bool, error) {
	resp, err := l.c.etcd.Get(ctx, record.DirOf(l.key), record.QueueRecords()...)
	if err != nil {
		l.giveUpTerm(p)
		return p, true, opErr(opTransfer.String(), l.name, unknown(ctx, record.RPCError(err)))
	}
	q := resp.Kvs
	own := record.Position(q, l.key, l.rev)
	if own < 0 && unknownBefore {
		// An earlier try, whose reply was lost, may have deleted the
		// record, or something else did (its session ended): only that
		// try's doing is a transfer.
		applied, err := l.transferApplied(ctx, p)
		switch {
		case err != nil:
			l.c.recs.forget(l, true)
			l.c.met.Result(opTransfer.String(), "unknown").Inc()
			return p, true, opErr(opTransfer.String(), l.name, unknown(ctx, fmt.Errorf("the term's record went while a try's reply was lost: %w", record.RPCError(err))))
		case applied:
			l.c.recs.forget(l, true)
			return p, true, nil
		}
	}
	switch {
	case own < 0 || !ownedBy(q[own].Value, l.owner.Value()):
		cause := ErrNotFound
		if len(q) > 0 {
			cause = ErrNotOwner
		}
		l.c.recs.forget(l, own < 0)
		l.c.met.Result(opTransfer.String(), outcomeLabel(cause)).Inc()
		return p, true, opErr(opTransfer.String(), l.name, cause)
	}
	p.own = q[own]
	ti, skipped, reason := record.Successor(q, own, to.Term.Revision, nil, MaxTransferSkip)
	if reason == "" && attempt >= maxAttempts {
		reason = "the queue kept changing"
	}
	if reason != "" {
		l.giveUpTerm(p)
		return p, true, l.notCandidate(to, reason, true)
	}
	p.to, p.skipped = q[ti], skipped
	return p, false, nil
}

// transferApplied finds out, from etcd's history, whether a try of the
// plan p deleted the term's record, which is gone: the first change of
// the record after the version p compared is its delete, and that delete
// shares its revision with the put of the successor's admit note only if
// it was this transfer's. It fails when that history was compacted away
// or cannot be read.
func (l *Lease) transferApplied(ctx context.Context, p transferPlan) (bool, error) {
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), l.sess.ttl)
	defer cancel()
	for resp := range l.c.etcd.Watch(wctx, l.key, clientv3.WithRev(p.own.ModRevision+1)) {
		if err := resp.Err(); err != nil {
			return false, err
		}
		if len(resp.Events) == 0 {
			continue
		}
		ev := resp.Events[0]
		if ev.Type != mvccpb.DELETE {
			return false, nil // changed first, so no try compared true
		}
		note, err := l.c.etcd.Get(wctx, record.AskKey(l.c.cfg.prefix, string(p.to.Key), p.to.CreateRevision), clientv3.WithRev(ev.Kv.ModRevision))
		if err != nil {
			return false, err
		}
		return len(note.Kvs) == 1 && note.Kvs[0].ModRevision == ev.Kv.ModRevision, nil
	}
	return false, errors.Join(errNoReply, wctx.Err())
}

// giveUpTerm deletes the record of a term that ended for a transfer that
// did not happen, in the background, comparing its value: the next
// candidate in line leads.
func (l *Lease) giveUpTerm(p transferPlan) {
	l.c.recs.forget(l, false)
	l.c.recs.abandon(l.sess, l.key, string(p.own.Value), l.rec.mark, false)
}

func (l *Lease) notCandidate(to Candidate, reason string, resigned bool) error {
	l.c.met.Result(opTransfer.String(), "not_candidate").Inc()
	return &NotCandidateError{Election: l.name, Revision: to.Term.Revision, Reason: reason, Resigned: resigned}
}

// admitNote ends the value of the note a transfer leaves its successor,
// under the successor's requests (see Client.handleAsk).
const admitNote = "admit"

// errSkipped reports that a transfer passed the acquisition over: its
// record was deleted by a Transfer to a candidate behind it, and it queues
// again.
var errSkipped = errors.New("lease: passed over by a transfer")

// skipped reports whether m's record, deleted, was deleted by a transfer
// that passed it over, and deletes the note saying so.
func (m *member) skipped(ctx context.Context) bool {
	c, w := m.c, m.w
	w.mu.Lock()
	rev := w.myRev
	w.mu.Unlock()
	if rev == 0 || w.kind != record.Exclusive {
		return false
	}
	// One request: the note is there, and then deleted, or not.
	key := record.SkipKey(c.cfg.prefix, w.key, rev)
	resp, err := c.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		// Unknown: a note left undeleted goes with its session.
		c.log.Debug("lease transfer note not read", logattr.Lock(record.DirName(w.key)), slog.String("error", err.Error()))
		return false
	}
	return resp.Succeeded
}

// RequestTransfer asks the leader whose term is term to hand it to the
// waiting candidate to, from any process: the cooperative, cross-process
// form of Term.Transfer, as admin.Admin.RequestRelease is of Release. The
// request is written only if term still leads and to still waits, in one
// transaction comparing both records' creation revisions; otherwise it
// writes nothing and returns a *NotHolderError (term does not lead) or a
// *NotCandidateError (to is no waiting candidate, judged as Term.Transfer
// judges it, so that a read lock, a set member or a lock-delay marker is
// refused). Any other error means the outcome is unknown; asking again is
// harmless.
//
// The leader hears it within the time an etcd watch event takes: its
// Term.ReleaseRequested closes and Term.TransferRequested names to.
// Election.Run (and Client.Do, for a plain Lease at the head of the
// election's queue) acts on it by itself: it transfers the term, which
// cancels its function's context with ErrTransferred; if to has left by
// then, it cancels the context with ErrReleaseRequested and resigns as for
// a request to release. A leader that holds its term from Campaign
// decides itself (fencekit elect transfers once its command has exited).
func (e *Election) RequestTransfer(ctx context.Context, term int64, to Candidate) error {
	if term <= 0 {
		return fmt.Errorf("lease: request transfer %q: term %d is not positive", e.name, term)
	}
	if to.Term.Lock != e.name {
		return &NotCandidateError{Election: e.name, Revision: to.Term.Revision, Reason: fmt.Sprintf("a term of election %q", to.Term.Lock)}
	}
	for range maxAttempts {
		q, members, err := e.c.readSuccessor(ctx, record.Dir(e.c.cfg.prefix, e.name), to.Term.Revision)
		if err != nil {
			return opErr("request transfer", e.name, errors.Join(record.RPCError(err), ctx.Err()))
		}
		lead := record.LeaderIndex(q)
		switch {
		case len(q) == 0, record.IsMarker(string(q[lead].Key)):
			// Nobody leads: the queue is empty, or waits out a lock-delay.
			return &NotHolderError{Lock: e.name, Revision: term}
		case q[lead].CreateRevision != term:
			return &NotHolderError{Lock: e.name, Revision: term, Holder: q[lead].CreateRevision}
		case q[lead].Lease == 0:
			return opErr("request transfer", e.name, errors.New("the leader's record is kept by no session, so no Client can hear the request"))
		}
		ti, _, reason := record.Successor(q, lead, to.Term.Revision, members, MaxTransferSkip)
		if reason != "" {
			return &NotCandidateError{Election: e.name, Revision: to.Term.Revision, Reason: reason}
		}
		head := string(q[lead].Key)
		put := clientv3.OpPut(record.AskKey(e.c.cfg.prefix, head, term), head+"\n"+strconv.FormatInt(to.Term.Revision, 10),
			clientv3.WithLease(clientv3.LeaseID(q[lead].Lease)))
		tr, err := e.c.etcd.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(head), "=", term),
			clientv3.Compare(clientv3.CreateRevision(string(q[ti].Key)), "=", to.Term.Revision),
		).Then(put).Commit()
		switch {
		case err != nil:
			return opErr("request transfer", e.name, unknown(ctx, record.RPCError(err)))
		case tr.Succeeded:
			e.c.log.Info("lease transfer requested", logattr.Lock(e.name), logattr.Fence(term), slog.Int64("successor", to.Term.Revision))
			return nil
		}
		// One of them went between the read and the write: read again.
	}
	return opErr("request transfer", e.name, errors.New("the queue kept changing; nothing was asked"))
}

// ReleaseRequested is closed when someone asked this term's leader to
// resign (admin.Admin.RequestRelease) or to transfer the term
// (Election.RequestTransfer; see TransferRequested). It stays open
// otherwise, also after the term ends.
func (t *Term) ReleaseRequested() <-chan struct{} { return t.l.ReleaseRequested() }

// TransferRequested returns the candidate that Election.RequestTransfer
// asked this term's leader to hand the term to (its Term only; Value is
// empty), once ReleaseRequested has closed; ok is false while no transfer
// was asked for.
func (t *Term) TransferRequested() (to Candidate, ok bool) {
	rev := t.l.asked.to.Load()
	if rev == 0 {
		return Candidate{}, false
	}
	return Candidate{Term: fence.Token{Lock: t.l.name, Revision: rev}}, true
}

// honourAsk acts on a request to release or transfer l while run runs fn
// (cancel cancels fn's context): it transfers l when a successor was
// named and still waits, and otherwise cancels fn's context with
// ErrReleaseRequested, after which run releases l.
func (l *Lease) honourAsk(ctx context.Context, cancel context.CancelCauseFunc) {
	if to := l.asked.to.Load(); to != 0 && l.kind == record.Exclusive {
		tctx, tcancel := context.WithTimeout(context.WithoutCancel(ctx), l.sess.ttl)
		err := l.transfer(tctx, Candidate{Term: fence.Token{Lock: l.name, Revision: to}})
		tcancel()
		if err != nil && l.Err() == nil {
			l.c.log.LogAttrs(ctx, slog.LevelWarn, "lease transfer requested but not done; releasing instead",
				append(l.attrs(), slog.String("error", err.Error()))...)
		}
		if l.Err() != nil {
			return // transferred (or ended otherwise): fn's context is cancelled with the cause
		}
	}
	cancel(ErrReleaseRequested)
}
