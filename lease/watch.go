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

// eventSink is what a watchSet delivers to: every change of a watched key,
// and after events were compacted away, what a read of the watched keys
// found. The records table is the one sink; the watch layer knows nothing
// of leases, waiters or orphans.
type eventSink interface {
	// put applies a write of kv.
	put(kv *mvccpb.KeyValue)
	// deleted applies a delete of key at revision rev.
	deleted(key string, rev int64)
	// resync applies a read, at revision at, of every key covers accepts
	// (present holds those that exist). It reports false when the sink is
	// closed.
	resync(covers func(string) bool, present map[string]*mvccpb.KeyValue, at int64) bool
}

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

// watchSet is a Client's watches. Its map and mode are guarded by the
// lock of the records table that owns it; its goroutines deliver to sink
// without that lock.
type watchSet struct {
	etcd   *clientv3.Client
	bg     *group
	log    *slog.Logger
	prefix string        // the Client's prefix (see enterPrefixMode)
	ttl    time.Duration // bounds a resync's read; an own key's watch lingers this long unused
	sink   eventSink
	used   func(key string) bool // whether the sink still needs key's events; called under the table's lock

	m          map[string]*keyWatch // watched key (or directory, or the prefix) -> its watch
	prefixMode bool                 // one watch of the whole prefix (see maxWatches)
}

// own returns the watch that covers key, one of the Client's own record
// keys, starting one if needed.
func (ws *watchSet) own(key string) *keyWatch {
	kw := ws.watch(key, false)
	kw.own = true
	return kw
}

// hold returns the watch that covers key (every key under it if prefix)
// for a waiter, and counts the waiter among its users; drop undoes that.
func (ws *watchSet) hold(key string, prefix bool) *keyWatch {
	kw := ws.watch(key, prefix)
	kw.refs++
	return kw
}

// drop ends a waiter's use of kw, and stops kw if nothing else uses it and
// it is not one of the Client's own keys (those linger, see sweep).
func (ws *watchSet) drop(kw *keyWatch) {
	if kw == nil {
		return
	}
	kw.refs--
	if kw.refs <= 0 && !kw.own && ws.m[kw.key] == kw && !ws.prefixMode {
		kw.cancel()
		delete(ws.m, kw.key)
	}
}

// current reports whether kw is still one of the set's watches (not
// replaced by the prefix watch).
func (ws *watchSet) current(kw *keyWatch) bool {
	return kw != nil && ws.m[kw.key] == kw
}

// watch returns the watch that covers key, starting one if needed, and
// marks it used.
func (ws *watchSet) watch(key string, prefix bool) *keyWatch {
	if ws.prefixMode {
		return ws.m[ws.prefix]
	}
	if kw := ws.m[key]; kw != nil {
		kw.idle = time.Time{}
		return kw
	}
	if len(ws.m) >= maxWatches {
		ws.sweep(true)
	}
	if len(ws.m) >= maxWatches {
		return ws.enterPrefixMode()
	}
	return ws.start(key, prefix)
}

// start starts watching key from the current revision: a watch that
// starts at a revision not yet in the past is "synced" in etcd, so events
// arrive in about a millisecond (one that starts in the past waits for
// etcd's sweep of unsynced watchers, every 100 ms). Whoever needs events
// from an earlier revision compares it with the watch's start once created
// closes, and reads what it may have missed.
func (ws *watchSet) start(key string, prefix bool) *keyWatch {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ws.bg.ctx))
	kw := &keyWatch{key: key, prefix: prefix, cancel: cancel, created: make(chan struct{})}
	ws.m[key] = kw
	ws.bg.spawn(func() { ws.run(ctx, kw) })
	return kw
}

// enterPrefixMode replaces the watches with one watch of the whole prefix.
// Once that watch is confirmed, a read of every record under the prefix
// catches up with whatever the other watches had not delivered yet, and
// they are stopped.
func (ws *watchSet) enterPrefixMode() *keyWatch {
	ws.prefixMode = true
	old := ws.m
	ws.m = map[string]*keyWatch{}
	kw := ws.start(ws.prefix, true)
	ws.bg.spawn(func() {
		ws.log.Info("lease client watches its whole prefix", slog.Int("watches", len(old)))
		if !ws.bg.wait(kw.created) {
			return
		}
		for {
			if _, ok := ws.resync(kw); ok || ws.bg.ctx.Err() != nil {
				break
			}
			if !ws.bg.sleep(100 * time.Millisecond) {
				return
			}
		}
		for _, w := range old {
			w.cancel()
		}
	})
	return kw
}

// sweep stops the watches of the Client's own keys that nothing has used
// for a TTL (or at once, when full). It runs after every session renewal.
func (ws *watchSet) sweep(full bool) {
	if ws.prefixMode {
		return
	}
	now := time.Now()
	for key, kw := range ws.m {
		switch {
		case kw.refs > 0 || ws.used(key):
			kw.idle = time.Time{}
		case kw.idle.IsZero() && !full && kw.own:
			kw.idle = now
		case full || !kw.own || now.Sub(kw.idle) >= ws.ttl:
			kw.cancel()
			delete(ws.m, key)
		}
	}
}

// run follows every change of kw's keys, delivering each to the sink,
// until kw is cancelled or the Client closes.
func (ws *watchSet) run(ctx context.Context, kw *keyWatch) {
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
		resync := ws.follow(ctx, kw, &rev, &backoff)
		if ctx.Err() != nil {
			return
		}
		if resync {
			if r, ok := ws.resync(kw); ok {
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

// follow runs one etcd watch of kw from *rev (from now while it is 0) and
// delivers its events, until it ends; a failure doubles *backoff, events
// reset it. It reports whether events were compacted away.
func (ws *watchSet) follow(ctx context.Context, kw *keyWatch, rev *int64, backoff *time.Duration) (resync bool) {
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if kw.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if *rev > 0 {
		opts = append(opts, clientv3.WithRev(*rev))
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range ws.etcd.Watch(wctx, kw.key, opts...) {
		if resp.Created && *rev == 0 {
			*rev = resp.Header.Revision + 1
			kw.start = resp.Header.Revision
			close(kw.created)
			continue
		}
		if resp.CompactRevision != 0 {
			return true
		}
		if err := resp.Err(); err != nil {
			// etcd cancels a watch the user may not read with a reason in
			// text only, which err carries (its CancelReason field exists
			// only from client v3.7); say so, and back off.
			ws.log.Warn("lease watch failed", slog.String("error", err.Error()))
			*backoff = min(2**backoff, time.Second)
			return false
		}
		*backoff = 20 * time.Millisecond
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				ws.sink.deleted(string(ev.Kv.Key), ev.Kv.ModRevision)
			} else {
				ws.sink.put(ev.Kv)
			}
			*rev = ev.Kv.ModRevision + 1
		}
	}
	return false
}

// resync runs after the events of kw were compacted away: it reads every
// key kw covers and hands the read to the sink. It returns the revision
// to watch from.
func (ws *watchSet) resync(kw *keyWatch) (int64, bool) {
	ctx, cancel := context.WithTimeout(ws.bg.ctx, ws.ttl)
	defer cancel()
	var opts []clientv3.OpOption
	if kw.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := ws.etcd.Get(ctx, kw.key, opts...)
	if err != nil {
		return 0, false
	}
	present := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv
	}
	if !ws.sink.resync(kw.covers, present, resp.Header.Revision) {
		return 0, false
	}
	return resp.Header.Revision + 1, true
}
