package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxTransferSkip is the most candidates a Transfer may pass over: those
// queued between the leader and the chosen successor. Each costs the
// transfer's transaction two operations, and etcd bounds a transaction's
// operations (128 by default).
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
	resp, err := e.c.etcd.Get(ctx, lockDir(e.c.cfg.prefix, e.name), queueRecords()...)
	if err != nil {
		return nil, opErr("candidates", e.name, errors.Join(rpcError(err), ctx.Err()))
	}
	var cs []Candidate
	for i, kv := range resp.Kvs {
		if k, ok := kindOf(string(kv.Key)); i == 0 || !ok || k != exclusive {
			continue
		}
		_, _, payload, _ := decodeRecord(kv.Value)
		_, value := decodePayload(payload)
		cs = append(cs, Candidate{Value: value, Term: fence.Token{Lock: e.name, Revision: kv.CreateRevision}})
	}
	return cs, nil
}

// Transfer hands the term to the candidate to, which must be waiting in
// the election (see Election.Candidates): to leads next, with a term
// higher than this one, however many candidates queued ahead of it.
//
// The hand-off has no overlap and no gap. Transfer first reads the queue
// and refuses a to that is not waiting (never queued, gone, or this
// leader) with a *NotCandidateError, changing nothing. Otherwise it ends
// the term (Done closes; Err and the Context's cause are ErrTransferred)
// before it sends anything, and then one transaction, comparing this
// term's owner token and record version as Release does, deletes the
// term's record: to is admitted by that very transaction, so it leads
// within the time its Client takes to see the delete (one watch event,
// sometimes plus one read).
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
// ErrNotFound means the term had been lost already. An error matching
// ErrOutcomeUnknown means no reply came (each try is resent for up to one
// TTL, as Release's are): the transfer may have applied; if it did not,
// the Client deletes the term's record in the background, comparing its
// owner token, so that the next candidate leads. Either way the term has
// ended. A term that has ended returns its Err at once.
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
		return opErr(opTransfer.String(), l.name, context.Cause(l.fin.ctx))
	}
	l.end(ErrTransferred)
	ended := time.Now()
	err = l.sendTransfer(ctx, to, p)
	if err == nil {
		l.c.met.result(opTransfer, "done").Inc()
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
	resp, err := l.c.etcd.Get(ctx, dirOf(l.key), queueRecords()...)
	if err != nil {
		return transferPlan{}, opErr(opTransfer.String(), l.name, errors.Join(rpcError(err), ctx.Err()))
	}
	q := resp.Kvs
	own := position(q, l.key, l.rev)
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
	if own != 0 {
		return transferPlan{}, opErr(opTransfer.String(), l.name, errors.New("a record no session keeps heads the queue"))
	}
	ti := -1
	for i, kv := range q {
		if kv.CreateRevision == to.Term.Revision {
			ti = i
		}
	}
	switch {
	case ti == 0:
		return transferPlan{}, l.notCandidate(to, "it is the leader", false)
	case ti < 0:
		return transferPlan{}, l.notCandidate(to, "no such candidate waits", false)
	case ti-1 > MaxTransferSkip:
		return transferPlan{}, l.notCandidate(to, fmt.Sprintf("%d candidates queue ahead of it, more than %d", ti-1, MaxTransferSkip), false)
	}
	for _, kv := range q[1 : ti+1] {
		if k, ok := kindOf(string(kv.Key)); !ok || k != exclusive || kv.Lease == 0 {
			return transferPlan{}, l.notCandidate(to, fmt.Sprintf("the record %s is no candidate's", kv.Key), false)
		}
	}
	return transferPlan{own: q[0], to: q[ti], skipped: q[1:ti]}, nil
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
	ops := []clientv3.Op{clientv3.OpDelete(string(p.own.Key))}
	for _, kv := range p.skipped {
		key := string(kv.Key)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision))
		ops = append(ops, clientv3.OpDelete(key),
			clientv3.OpPut(skipKey(c.cfg.prefix, key, kv.CreateRevision), strconv.FormatInt(p.to.CreateRevision, 10),
				clientv3.WithLease(clientv3.LeaseID(kv.Lease))))
	}
	return c.etcd.Txn(ctx).If(cmps...).Then(ops...)
}

// sendTransfer sends the plan's transaction, resending it while its
// outcome is unknown, and planning it again when a skipped record changed
// under it. The term has ended; the record must go whatever happens.
func (l *Lease) sendTransfer(ctx context.Context, to Candidate, p transferPlan) error {
	r := newResender(l.sess.ttl, &l.c.lat.change)
	unknownBefore := false
	for attempt := 1; ; attempt++ {
		d := r.deadline()
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
		case errors.Is(rpcError(err), ErrPermissionDenied):
			l.giveUpTerm(p)
			return opErr(opTransfer.String(), l.name, rpcError(err))
		}
		unknownBefore = true
		if !r.again(ctx, l.c) {
			l.giveUpTerm(p)
			l.c.met.result(opTransfer, "unknown").Inc()
			return opErr(opTransfer.String(), l.name, unknown(ctx, rpcError(err)))
		}
	}
}

// replan reads the queue after the transfer's compare failed, and returns
// the plan to send next, or done and the transfer's result.
func (l *Lease) replan(ctx context.Context, to Candidate, p transferPlan, unknownBefore bool, attempt int) (transferPlan, bool, error) {
	resp, err := l.c.etcd.Get(ctx, dirOf(l.key), queueRecords()...)
	if err != nil {
		l.giveUpTerm(p)
		return p, true, opErr(opTransfer.String(), l.name, unknown(ctx, rpcError(err)))
	}
	q := resp.Kvs
	own := position(q, l.key, l.rev)
	switch {
	case own < 0 && unknownBefore:
		// An earlier try, whose reply was lost, applied (or the record
		// went otherwise): either way the term is over, as asked.
		l.c.recs.forget(l, true)
		return p, true, nil
	case own < 0 || !ownedBy(q[own].Value, l.owner.Value()):
		cause := ErrNotFound
		if len(q) > 0 {
			cause = ErrNotOwner
		}
		l.c.recs.forget(l, own < 0)
		l.c.met.result(opTransfer, outcomeLabel(cause)).Inc()
		return p, true, opErr(opTransfer.String(), l.name, cause)
	}
	p.own = q[own]
	ti := -1
	for i, kv := range q {
		if kv.CreateRevision == to.Term.Revision {
			ti = i
		}
	}
	if ti <= own || ti-own-1 > MaxTransferSkip || attempt >= maxAttempts {
		l.giveUpTerm(p)
		return p, true, l.notCandidate(to, "it left the queue", true)
	}
	p.to, p.skipped = q[ti], q[own+1:ti]
	return p, false, nil
}

// giveUpTerm deletes the record of a term that ended for a transfer that
// did not happen, in the background, comparing its value: the next
// candidate in line leads.
func (l *Lease) giveUpTerm(p transferPlan) {
	l.c.recs.forget(l, false)
	l.c.recs.abandon(l.sess, l.key, string(p.own.Value), false)
}

func (l *Lease) notCandidate(to Candidate, reason string, resigned bool) error {
	l.c.met.result(opTransfer, "not_candidate").Inc()
	return &NotCandidateError{Election: l.name, Revision: to.Term.Revision, Reason: reason, Resigned: resigned}
}

// skipKey is the note a transfer leaves for the candidate whose record
// (recordKey, created at rev) it deleted to pass it over: under the
// prefix, in the space of the empty lock name, which no lock can have.
func skipKey(prefix, recordKey string, rev int64) string {
	return prefix + "/skipped/" + recordKey[strings.LastIndexByte(recordKey, '/')+1:] + "@" + strconv.FormatInt(rev, 10)
}

// errSkipped reports that a transfer passed the acquisition over: its
// record was deleted by a Transfer to a candidate behind it, and it queues
// again.
var errSkipped = errors.New("lease: passed over by a transfer")

// skipped reports whether w's record, deleted, was deleted by a transfer
// that passed it over, and deletes the note saying so.
func (c *Client) skipped(ctx context.Context, w *waiter) bool {
	w.mu.Lock()
	rev := w.myRev
	w.mu.Unlock()
	if rev == 0 || w.kind != exclusive {
		return false
	}
	key := skipKey(c.cfg.prefix, w.key, rev)
	resp, err := c.etcd.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil || resp.Count == 0 {
		return false
	}
	if _, err := c.etcd.Delete(ctx, key); err != nil {
		c.log.Debug("lease transfer note not deleted; it goes with its session", logattr.Lock(dirName(w.key)), slog.String("error", err.Error()))
	}
	return true
}
