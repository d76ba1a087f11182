package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startWatch starts the Client's one watch of its whole prefix, from the
// current revision, before any record of this Client can exist.
func (c *Client) startWatch(ctx context.Context) error {
	c.mu.Lock()
	watching := c.watching
	c.mu.Unlock()
	if watching {
		return nil
	}
	resp, err := c.etcd.Get(ctx, c.cfg.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("lease: read revision: %w", errors.Join(rpcError(err), ctx.Err()))
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.watching = true
	c.wg.Add(1)
	c.mu.Unlock()
	go c.watch(resp.Header.Revision + 1)
	return nil
}

// watch follows every change under the prefix from rev on: it ends leases
// whose records were deleted or overwritten and wakes waiters whose
// predecessor left. Watching from a revision not yet in the past keeps the
// watcher "synced" in etcd, so events arrive in about a millisecond.
func (c *Client) watch(rev int64) {
	defer c.wg.Done()
	backoff := 20 * time.Millisecond
	for c.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(c.ctx))
		wch := c.etcd.Watch(ctx, c.cfg.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		resync := false
		for resp := range wch {
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
		if c.ctx.Err() != nil {
			return
		}
		if resync {
			if r, ok := c.resync(); ok {
				rev = r
			}
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// resync runs after events were compacted away. It reads every record under
// the prefix and applies to held leases and waiters everything the missed
// events could have told: a record gone, recreated or overwritten. Then it
// wakes every waiter to re-read its queue. It returns the revision to watch
// from.
func (c *Client) resync() (int64, bool) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ttl)
	defer cancel()
	resp, err := c.etcd.Get(ctx, c.cfg.prefix, clientv3.WithPrefix())
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
	for k, l := range c.held {
		kv := present[k]
		if kv == nil || kv.CreateRevision != l.rev {
			if end := c.recordGoneLocked(l); end != nil {
				ends = append(ends, end)
			}
			continue
		}
		if tok, _, ok := decodeValue(kv.Value); l.releasing == relNone && (!ok || tok != l.owner.Value()) {
			delete(c.held, k)
			ends = append(ends, func() { l.end(&LostError{Fence: l.Fence(), Cause: ErrKeyOverwritten}) })
		}
	}
	for k, w := range c.waiters {
		w.resync(present[k])
		w.wake()
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
				end = func() { l.end(&LostError{Fence: l.Fence(), Cause: ErrKeyOverwritten}) }
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
