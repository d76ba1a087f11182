package lease

import (
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

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
// the record a waiter queues behind), or of a semaphore's directory.
//
// A Client watches its own record keys while it holds, waits for or
// cleans up a record there, and for about a TTL after that, so that a lock
// taken again and again (which reuses its key, see session.claimSlot) keeps its
// watch. A watch of someone else's record, or of a directory, is kept only
// while a waiter needs it (refs).
//
// Its fields own, refs and idle are guarded by the lock of the records
// table that owns the watch set; those from confirmed on by the
// watchStream's lock. It is 96 bytes.
type keyWatch struct {
	key    string
	start  int64 // the watch delivers every event after this revision; set once confirmed (see watchStream.created)
	prefix bool  // every key under key

	own  bool      // key is one of the Client's record keys
	refs int       // waiters that wait behind key (or in the directory key)
	idle time.Time // when the sweep first found it unused; zero while used

	waitc     chan struct{} // made for whoever waits for the confirmation before it came; nil after
	confirmed bool          // start is set
	stopped   bool          // stop ended it
	resyncing bool          // compacted or refused: a resync or retry asks for it again
	id        int64         // the id of its latest create request
	next      int64         // the revision to resume from: after the last event delivered; 0 until confirmed
}

// confirm sets kw's start, once, and wakes whoever waits for it. The
// watchStream's lock is held.
func (kw *keyWatch) confirm(start int64) {
	if kw.confirmed {
		return
	}
	kw.confirmed = true
	kw.start = start
	if kw.waitc != nil {
		close(kw.waitc)
		kw.waitc = nil
	}
}

// covers reports whether the watch delivers the events of key.
func (kw *keyWatch) covers(key string) bool {
	if kw.prefix {
		return strings.HasPrefix(key, kw.key)
	}
	return key == kw.key
}

// watchSet is a Client's watches, one per key (or semaphore directory) it
// needs events of, however many: all are carried by one watchStream, at a
// few hundred bytes each, and none covers other Clients' locks. Its map
// is guarded by the lock of the records table that owns it; the stream
// delivers to sink without that lock.
type watchSet struct {
	stream *watchStream
	ttl    time.Duration         // an own key's watch lingers this long unused
	used   func(key string) bool // whether the sink still needs key's events; called under the table's lock

	m map[string]*keyWatch // watched key (or directory) -> its watch
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
	if kw.refs <= 0 && !kw.own && ws.m[kw.key] == kw {
		ws.stream.stop(kw)
		delete(ws.m, kw.key)
	}
}

// created returns a channel closed once etcd confirmed kw (or kw stopped
// unconfirmed: then its start is MaxInt64); kw.start may be read after.
// It needs no lock of the records table.
func (ws *watchSet) created(kw *keyWatch) <-chan struct{} {
	return ws.stream.created(kw)
}

// current reports whether kw is still one of the set's watches.
func (ws *watchSet) current(kw *keyWatch) bool {
	return kw != nil && ws.m[kw.key] == kw
}

// watch returns the watch that covers key, starting one if needed, and
// marks it used.
func (ws *watchSet) watch(key string, prefix bool) *keyWatch {
	if kw := ws.m[key]; kw != nil {
		kw.idle = time.Time{}
		return kw
	}
	return ws.start(key, prefix)
}

// start starts watching key from the current revision: a watch that
// starts at a revision not yet in the past is "synced" in etcd, so events
// arrive in about a millisecond (one that starts in the past waits for
// etcd's sweep of unsynced watchers, every 100 ms). Whoever needs events
// from an earlier revision compares it with the watch's start once it is
// confirmed (created)
// closes, and reads what it may have missed.
func (ws *watchSet) start(key string, prefix bool) *keyWatch {
	kw := &keyWatch{key: key, prefix: prefix}
	ws.m[key] = kw
	ws.stream.add(kw)
	return kw
}

// sweep stops the watches of the Client's own keys that nothing has used
// for a TTL. It runs after every session renewal.
func (ws *watchSet) sweep() {
	now := time.Now()
	for key, kw := range ws.m {
		switch {
		case kw.refs > 0 || ws.used(key):
			kw.idle = time.Time{}
		case kw.idle.IsZero() && kw.own:
			kw.idle = now
		case !kw.own || now.Sub(kw.idle) >= ws.ttl:
			ws.stream.stop(kw)
			delete(ws.m, key)
		}
	}
}
