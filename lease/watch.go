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

// maxWatches is how many watches a Client keeps one by one. A Client that
// would need more watches its whole prefix instead, for the rest of its
// life: it is the fleet itself then, and one watch costs less than
// thousands.
const maxWatches = 512

// keyWatch is one of a Client's watches: of one record key (its own, or
// the record a waiter queues behind), of a semaphore's directory, or of
// the whole prefix in prefix mode.
//
// A Client watches its own record keys while it holds, waits for or
// cleans up a record there, and for about a TTL after that, so that a lock
// taken again and again (which reuses its key, see session.claimSlot) keeps its
// watch. A watch of someone else's record, or of a directory, is kept only
// while a waiter needs it (refs).
type keyWatch struct {
	key     string
	prefix  bool // every key under key
	cancel  context.CancelFunc
	created chan struct{} // closed once etcd confirmed the watch
	start   int64         // the watch delivers every event after this revision; set before created closes
	refs    int           // waiters that wait behind key (or in the directory key)
	own     bool          // key is one of the Client's record keys
	idle    time.Time     // when the sweep first found it unused; zero while used
}

// covers reports whether the watch delivers the events of key.
func (kw *keyWatch) covers(key string) bool {
	if kw.prefix {
		return strings.HasPrefix(key, kw.key)
	}
	return key == kw.key
}

// watchOwnLocked returns the watch that covers key, one of the Client's
// own record keys, starting one if needed. c.mu is held.
func (c *Client) watchOwnLocked(key string) *keyWatch {
	kw := c.watchLocked(key, false)
	kw.own = true
	return kw
}

// holdWatchLocked returns the watch that covers key (every key under it if
// prefix) for a waiter, and counts the waiter among its users; dropWatchLocked
// undoes that. c.mu is held.
func (c *Client) holdWatchLocked(key string, prefix bool) *keyWatch {
	kw := c.watchLocked(key, prefix)
	kw.refs++
	return kw
}

// dropWatchLocked ends a waiter's use of kw, and stops kw if nothing else
// uses it and it is not one of the Client's own keys (those linger, see
// sweepLocked). c.mu is held.
func (c *Client) dropWatchLocked(kw *keyWatch) {
	if kw == nil {
		return
	}
	kw.refs--
	if kw.refs <= 0 && !kw.own && c.watches[kw.key] == kw && !c.prefixMode {
		kw.cancel()
		delete(c.watches, kw.key)
	}
}

// watchLocked returns the watch that covers key, starting one if needed,
// and marks it used. c.mu is held.
func (c *Client) watchLocked(key string, prefix bool) *keyWatch {
	if c.prefixMode {
		return c.watches[c.cfg.prefix]
	}
	if kw := c.watches[key]; kw != nil {
		kw.idle = time.Time{}
		return kw
	}
	if len(c.watches) >= maxWatches {
		c.sweepLocked(true)
	}
	if len(c.watches) >= maxWatches {
		return c.enterPrefixModeLocked()
	}
	return c.startWatchLocked(key, prefix)
}

// startWatchLocked starts watching key from the current revision: a watch
// that starts at a revision not yet in the past is "synced" in etcd, so
// events arrive in about a millisecond (one that starts in the past waits
// for etcd's sweep of unsynced watchers, every 100 ms). Whoever needs
// events from an earlier revision compares it with the watch's start once
// created closes, and reads what it may have missed. c.mu is held.
func (c *Client) startWatchLocked(key string, prefix bool) *keyWatch {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(c.ctx))
	kw := &keyWatch{key: key, prefix: prefix, cancel: cancel, created: make(chan struct{})}
	c.watches[key] = kw
	c.wg.Add(1)
	go c.runWatch(ctx, kw)
	return kw
}

// enterPrefixModeLocked replaces the Client's watches with one watch of
// the whole prefix. Once that watch is confirmed, a read of every record
// under the prefix catches up with whatever the other watches had not
// delivered yet, and they are stopped. c.mu is held.
func (c *Client) enterPrefixModeLocked() *keyWatch {
	c.prefixMode = true
	old := c.watches
	c.watches = map[string]*keyWatch{}
	kw := c.startWatchLocked(c.cfg.prefix, true)
	c.log.Info("lease client watches its whole prefix", slog.Int("watches", len(old)))
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-kw.created:
		case <-c.ctx.Done():
			return
		}
		for {
			if _, ok := c.resync(kw); ok || c.ctx.Err() != nil {
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
	return kw
}

// sweepLocked stops the watches of the Client's own keys that nothing has
// used for a TTL (or at once, when full). It runs after every session
// renewal. c.mu is held.
func (c *Client) sweepLocked(full bool) {
	if c.prefixMode {
		return
	}
	now := time.Now()
	for key, kw := range c.watches {
		_, held := c.held[key]
		_, waiting := c.waiters[key]
		_, orphan := c.orphans[key]
		switch {
		case kw.refs > 0 || held || waiting || orphan:
			kw.idle = time.Time{}
		case kw.idle.IsZero() && !full && kw.own:
			kw.idle = now
		case full || !kw.own || now.Sub(kw.idle) >= c.cfg.ttl:
			kw.cancel()
			delete(c.watches, key)
		}
	}
}

// runWatch follows every change of kw's keys until kw is cancelled or the
// Client closes: it ends leases whose records were deleted or overwritten,
// wakes waiters whose predecessor left, and deletes late orphans.
func (c *Client) runWatch(ctx context.Context, kw *keyWatch) {
	defer c.wg.Done()
	var rev int64 // next revision to watch from; 0 until the first watch is confirmed
	defer func() {
		if rev == 0 {
			// Stopped before etcd confirmed it: whoever waits for it must
			// read again.
			kw.start = math.MaxInt64
			close(kw.created)
		}
	}()
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
		if kw.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		wctx, cancel := context.WithCancel(ctx)
		resync := false
		for resp := range c.etcd.Watch(wctx, kw.key, opts...) {
			if resp.Created && rev == 0 {
				rev = resp.Header.Revision + 1
				kw.start = resp.Header.Revision
				close(kw.created)
				continue
			}
			if resp.CompactRevision != 0 {
				resync = true
				break
			}
			if err := resp.Err(); err != nil {
				// etcd cancels a watch the user may not read with a
				// reason in text only, which err carries (its
				// CancelReason field exists only from client v3.7);
				// say so, and back off.
				c.log.Warn("lease watch failed", slog.String("error", err.Error()))
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
			if r, ok := c.resync(kw); ok {
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

// resync runs after the events of kw were compacted away. It reads every
// record kw covers and applies to held leases and waiters everything the
// missed events could have told: a record gone, recreated or overwritten.
// Then it wakes those waiters to look again. It returns the revision to
// watch from.
func (c *Client) resync(kw *keyWatch) (int64, bool) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ttl)
	defer cancel()
	var opts []clientv3.OpOption
	if kw.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := c.etcd.Get(ctx, kw.key, opts...)
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
		if !kw.covers(k) || l.rev > at {
			continue // created after the read: the watch covers it
		}
		kv := present[k]
		if kv == nil || kv.CreateRevision != l.rev {
			if end := c.recordGoneLocked(l); end != nil {
				ends = append(ends, end)
			}
			continue
		}
		if tok, _, ok := decodeValue(kv.Value); l.rel.get() == relNone && (!ok || tok != l.owner.Value()) {
			delete(c.held, k)
			ends = append(ends, func() { l.end(l.lostError(ErrKeyOverwritten)) })
		}
	}
	for _, w := range c.waiters {
		w.resync(kw.covers, present, at)
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
		if l := c.held[key]; l != nil && rev > l.rev && l.rel.get() == relNone {
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
