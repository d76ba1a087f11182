package lease

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/lease/internal/record"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchAsks follows the requests to release the records of s, from the
// revision s was granted at, until s ends or the Client closes, and tells
// each lease it names (see Lease.ReleaseRequested). A request is deleted
// once handled.
func (c *Client) watchAsks(s *session, from int64) {
	ctx, cancel := context.WithCancel(c.bg.Context())
	defer cancel()
	stop := context.AfterFunc(s.fin.Context(), cancel)
	defer stop()
	dir := record.AskDir(c.cfg.prefix, s.keyID)
	for ctx.Err() == nil {
		from = c.followAsks(ctx, dir, from)
		if !c.bg.Sleep(100 * time.Millisecond) {
			return
		}
		from = c.catchUpAsks(ctx, dir, from)
	}
}

// followAsks handles the requests of one watch of dir from revision from,
// until the watch ends or fails (compacted, cancelled, refused), and
// returns the revision to watch from next. The watch is cancelled when it
// returns: the etcd client's watcher would otherwise go on sending to a
// channel nobody reads, and its Close would wait for it forever.
func (c *Client) followAsks(ctx context.Context, dir string, from int64) int64 {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range c.etcd.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if resp.Err() != nil {
			return from // read what is there, then watch again
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				c.handleAsk(ctx, string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.ModRevision)
			}
			from = ev.Kv.ModRevision + 1
		}
	}
	return from
}

// catchUpAsks handles the requests present under dir, after a watch ended,
// and returns the revision to watch from.
func (c *Client) catchUpAsks(ctx context.Context, dir string, from int64) int64 {
	resp, err := c.etcd.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return from
	}
	for _, kv := range resp.Kvs {
		c.handleAsk(ctx, string(kv.Key), string(kv.Value), kv.ModRevision)
	}
	return resp.Header.Revision + 1
}

// handleAsk tells the lease that holds the record recordKey, at the
// revision the request key names, that its release is requested, and
// deletes the request.
func (c *Client) handleAsk(ctx context.Context, ask, value string, at int64) {
	// The value is the record key, then, for a request to transfer, a
	// newline and the successor's term, or, for the successor a transfer
	// admitted at revision at, a newline and "admit" (see transferPlan).
	recordKey, succ, _ := strings.Cut(value, "\n")
	if rev, err := strconv.ParseInt(ask[strings.LastIndexByte(ask, '-')+1:], 10, 64); err == nil {
		if succ == admitNote {
			c.recs.headed(recordKey, rev, at)
		} else {
			to, _ := strconv.ParseInt(succ, 10, 64)
			c.recs.ask(recordKey, rev, max(to, 0))
		}
	}
	if _, err := c.etcd.Delete(ctx, ask); err != nil && ctx.Err() == nil {
		c.log.Debug("lease release request not deleted; it goes with its session", slog.String("error", err.Error()))
	}
}

// releaseAsk is a Lease's request to release: its context is cancelled
// once asked. It is made on first use (most leases are never asked, nor
// watched for it), so that an acquisition costs nothing for it.
type releaseAsk struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	// to is the term of the candidate a request to transfer named
	// (Election.RequestTransfer), set before the request is made; 0 for
	// a request to release.
	to atomic.Int64
}

// get returns the context that is cancelled once asked.
func (a *releaseAsk) get() context.Context {
	a.once.Do(func() { a.ctx, a.cancel = context.WithCancel(context.Background()) })
	return a.ctx
}

// request asks for a release, or for a transfer to the candidate whose
// term is to (0: none named).
func (a *releaseAsk) request(to int64) {
	if to != 0 {
		a.to.CompareAndSwap(0, to) // the first request named wins
	}
	a.get()
	a.cancel()
}

// ReleaseRequested is closed when someone asked this lease's holder to
// release the lock (admin.Admin.RequestRelease), or to hand it to a waiting
// candidate (Election.RequestTransfer; Do then transfers). It stays open
// otherwise, also after the lease ends.
func (l *Lease) ReleaseRequested() <-chan struct{} { return l.asked.get().Done() }
