package lease

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxDirWatches is how many lock directories a Client watches one by one.
// A Client with records in more directories than that watches its whole
// prefix instead, for the rest of its life: it is the fleet itself then,
// and one watch costs less than thousands.
const maxDirWatches = 512

// dirWatch is a Client's watch of one lock directory (<prefix><name>/), or
// of its whole prefix in prefix mode. A directory is watched while the
// Client holds, waits for or cleans up a record in it, and for about a TTL
// after that, so that a lock taken again and again keeps its watch.
type dirWatch struct {
	key     string
	cancel  context.CancelFunc
	created chan struct{} // closed once etcd confirmed the watch
	start   int64         // the watch delivers every event after this revision; set before created closes
	idle    time.Time     // when the sweep first found it unused; zero while used
}

// watchLocked returns the watch that covers dir, starting one if needed,
// and marks it used. c.mu is held.
func (c *Client) watchLocked(dir string) *dirWatch {
	if c.prefixMode {
		return c.watches[c.cfg.prefix]
	}
	if dw := c.watches[dir]; dw != nil {
		dw.idle = time.Time{}
		return dw
	}
	if len(c.watches) >= maxDirWatches {
		c.sweepLocked(true)
	}
	if len(c.watches) >= maxDirWatches {
		return c.enterPrefixModeLocked()
	}
	return c.startWatchLocked(dir)
}

// startWatchLocked starts watching key (a directory or the prefix) from
// the current revision: a watch that starts at a revision not yet in the
// past is "synced" in etcd, so events arrive in about a millisecond. c.mu
// is held.
func (c *Client) startWatchLocked(key string) *dirWatch {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(c.ctx))
	dw := &dirWatch{key: key, cancel: cancel, created: make(chan struct{})}
	c.watches[key] = dw
	c.wg.Add(1)
	go c.runWatch(ctx, dw)
	return dw
}

// enterPrefixModeLocked replaces the directory watches with one watch of
// the whole prefix. Once that watch is confirmed, a read of every record
// under the prefix catches up with whatever the directory watches had not
// delivered yet, and they are stopped. c.mu is held.
func (c *Client) enterPrefixModeLocked() *dirWatch {
	c.prefixMode = true
	old := c.watches
	c.watches = map[string]*dirWatch{}
	dw := c.startWatchLocked(c.cfg.prefix)
	c.log.Info("lease client watches its whole prefix", slog.Int("lock_dirs", len(old)))
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-dw.created:
		case <-c.ctx.Done():
			return
		}
		for {
			if _, ok := c.resync(c.cfg.prefix); ok || c.ctx.Err() != nil {
				break
			}
			select {
			case <-c.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		for _, w := range old {
			w.cancel()
		}
	}()
	return dw
}

// sweepLocked stops the directory watches that nothing has used for a TTL
// (or at once, when full). It runs after every session renewal. c.mu is
// held.
func (c *Client) sweepLocked(full bool) {
	if c.prefixMode {
		return
	}
	used := make(map[string]bool, len(c.held)+len(c.waiters)+len(c.orphans))
	for k := range c.held {
		used[dirOf(k)] = true
	}
	for k := range c.waiters {
		used[dirOf(k)] = true
	}
	for k := range c.orphans {
		used[dirOf(k)] = true
	}
	now := time.Now()
	for dir, dw := range c.watches {
		switch {
		case used[dir]:
			dw.idle = time.Time{}
		case dw.idle.IsZero() && !full:
			dw.idle = now
		case full || now.Sub(dw.idle) >= c.cfg.ttl:
			dw.cancel()
			delete(c.watches, dir)
		}
	}
}

// runWatch follows every change under dw.key until dw is cancelled or the
// Client closes: it ends leases whose records were deleted or overwritten,
// wakes waiters whose predecessor left, and deletes late orphans.
func (c *Client) runWatch(ctx context.Context, dw *dirWatch) {
	defer c.wg.Done()
	var rev int64 // next revision to watch from; 0 until the first watch is confirmed
	defer func() {
		if rev == 0 {
			// Stopped before etcd confirmed it: whoever waits for it must
			// read again (see catchUp).
			dw.start = math.MaxInt64
			close(dw.created)
		}
	}()
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		wctx, cancel := context.WithCancel(ctx)
		resync := false
		for resp := range c.etcd.Watch(wctx, dw.key, opts...) {
			if resp.Created && rev == 0 {
				rev = resp.Header.Revision + 1
				dw.start = resp.Header.Revision
				close(dw.created)
				continue
			}
			if resp.CompactRevision != 0 {
				resync = true
				break
			}
			if err := resp.Err(); err != nil {
				// etcd cancels a watch the user may not read with a
				// reason in text only; say so, and back off.
				c.log.Warn("lease watch failed", slog.String("error", err.Error()), slog.String("reason", resp.CancelReason))
				backoff = min(2*backoff, time.Second)
				break
			}
			backoff = 20 * time.Millisecond
			for _, ev := range resp.Events {
				c.dispatch(ev)
				rev = ev.Kv.ModRevision + 1
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if resync {
			if r, ok := c.resync(dw.key); ok {
				rev = r
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// resync runs after the events of a watch of key were compacted away. It
// reads every record under key and applies to held leases and waiters
// there everything the missed events could have told: a record gone,
// recreated or overwritten. Then it wakes those waiters to re-read their
// queues. It returns the revision to watch from.
func (c *Client) resync(key string) (int64, bool) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ttl)
	defer cancel()
	resp, err := c.etcd.Get(ctx, key, clientv3.WithPrefix())
	if err != nil {
		return 0, false
	}
	present := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv
	}
	var ends []func()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, false
	}
	at := resp.Header.Revision
	for k, l := range c.held {
		if !strings.HasPrefix(k, key) || l.rev > at {
			continue // created after the read: the watch covers it
		}
		kv := present[k]
		if kv == nil || kv.CreateRevision != l.rev {
			if end := c.recordGoneLocked(l); end != nil {
				ends = append(ends, end)
			}
			continue
		}
		if tok, _, ok := decodeValue(kv.Value); l.releasing == relNone && (!ok || tok != l.owner.Value()) {
			delete(c.held, k)
			ends = append(ends, func() { l.end(l.lostError(ErrKeyOverwritten)) })
		}
	}
	for k, w := range c.waiters {
		if strings.HasPrefix(k, key) {
			w.resync(present, at)
		}
	}
	c.mu.Unlock()
	for _, end := range ends {
		end()
	}
	return resp.Header.Revision + 1, true
}

// dispatch applies one watch event to held leases, waiters and orphans.
func (c *Client) dispatch(ev *clientv3.Event) {
	key := string(ev.Kv.Key)
	var end func()
	c.mu.Lock()
	if c.closed { // Close ends everything
		c.mu.Unlock()
		return
	}
	// Keys are reused, so an event may be about an earlier record under
	// the same key: only events after a record's creation concern it.
	rev := ev.Kv.ModRevision
	switch ev.Type {
	case mvccpb.DELETE:
		if l := c.held[key]; l != nil && rev > l.rev {
			end = c.recordGoneLocked(l)
		}
		for w := range c.byDir[dirOf(key)] {
			w.onDelete(key, rev)
		}
	case mvccpb.PUT:
		tok, _, ok := decodeValue(ev.Kv.Value)
		if l := c.held[key]; l != nil && l.releasing == relNone && rev > l.rev {
			if ev.Kv.CreateRevision != l.rev || !ok || tok != l.owner.Value() {
				delete(c.held, key)
				end = func() { l.end(l.lostError(ErrKeyOverwritten)) }
			}
		}
		if w := c.waiters[key]; w != nil {
			w.onPut(rev, ok && tok == w.owner)
		}
		if o, found := c.orphans[key]; found && string(ev.Kv.Value) == o.value {
			// A write of a failed acquisition applied late: delete it now
			// rather than at the next renewal.
			c.cleanOrphanLocked(key, o)
		}
	}
	c.mu.Unlock()
	if end != nil {
		end()
	}
}

// recordGoneLocked handles a held lease whose record is gone, and returns
// what to run once c.mu is released (or nil). A delete while its last-hold
// Release is in flight is left to that Release to judge; a delete after it
// returned with an unknown outcome is that Release taking effect; any
// other delete is a loss. c.mu is held.
func (c *Client) recordGoneLocked(l *Lease) func() {
	switch l.releasing {
	case relInFlight:
		l.sawDelete = true
		return nil
	case relPending:
		c.finishLocked(l, true)
		return func() { l.end(ErrReleased) }
	}
	c.finishLocked(l, true)
	c.recordDeletedLocked(l)
	return nil
}
