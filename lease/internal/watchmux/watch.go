package watchmux

import (
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Sink is what a Set delivers to: every change of a watched key, and after
// events were compacted away, what a read of the watched keys found.
type Sink interface {
	// Put applies a write of kv.
	Put(kv *mvccpb.KeyValue)
	// Deleted applies a delete of key at revision rev.
	Deleted(key string, rev int64)
	// Resync applies a read, at revision at, of every key covers accepts
	// (present holds those that exist). It reports false when the sink is
	// closed.
	Resync(covers func(string) bool, present map[string]*mvccpb.KeyValue, at int64) bool
}

// Stats counts what a Set's stream carries.
type Stats interface {
	// Events adds n events received.
	Events(n int)
	// Watching adds delta to the number of watches kept.
	Watching(delta int)
}

// Watch is one of a Client's watches: of one record key (its own, or
// the record a waiter queues behind), or of a semaphore's directory.
//
// A Client watches its own record keys while it holds, waits for or
// cleans up a record there, and for about a TTL after that, so that a lock
// taken again and again (which reuses its key) keeps its watch. A watch of
// someone else's record, or of a directory, is kept only while a waiter
// needs it (refs).
//
// Its fields own, refs and idle are guarded by the lock the Set's owner
// holds around every Set call; those from confirmed on by the stream's
// lock. It is 96 bytes.
type Watch struct {
	key    string
	start  int64 // the watch delivers every event after this revision; set once confirmed (see mux.created)
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

// Start is the revision after which w delivers every event. It may be
// read once the channel Set.Created returns for w is closed: it is
// math.MaxInt64 for a watch stopped before etcd confirmed it.
func (w *Watch) Start() int64 { return w.start }

// confirm sets kw's start, once, and wakes whoever waits for it. The
// stream's lock is held.
func (w *Watch) confirm(start int64) {
	if w.confirmed {
		return
	}
	w.confirmed = true
	w.start = start
	if w.waitc != nil {
		close(w.waitc)
		w.waitc = nil
	}
}

// Covers reports whether w delivers the events of key.
func (w *Watch) Covers(key string) bool {
	if w.prefix {
		return strings.HasPrefix(key, w.key)
	}
	return key == w.key
}

// Set is a Client's watches, one per key (or semaphore directory) it
// needs events of, however many: all are carried by one stream, at a few
// hundred bytes each, and none covers other Clients' locks. Its owner
// calls its methods (all but Created) under one lock of its own; the
// stream delivers to the sink without that lock.
type Set struct {
	stream *mux
	ttl    time.Duration         // an own key's watch lingers this long unused
	used   func(key string) bool // whether the sink still needs key's events; called under the owner's lock

	m map[string]*Watch // watched key (or directory) -> its watch
}

// Own returns the watch that covers key, one of the Client's own record
// keys, starting one if needed.
func (ws *Set) Own(key string) *Watch {
	kw := ws.watch(key, false)
	kw.own = true
	return kw
}

// Hold returns the watch that covers key (every key under it if prefix)
// for a waiter, and counts the waiter among its users; Drop undoes that.
func (ws *Set) Hold(key string, prefix bool) *Watch {
	kw := ws.watch(key, prefix)
	kw.refs++
	return kw
}

// Drop ends a waiter's use of kw, and stops kw if nothing else uses it and
// it is not one of the Client's own keys (those linger, see Sweep).
func (ws *Set) Drop(kw *Watch) {
	if kw == nil {
		return
	}
	kw.refs--
	if kw.refs <= 0 && !kw.own && ws.m[kw.key] == kw {
		ws.stream.stop(kw)
		delete(ws.m, kw.key)
	}
}

// Created returns a channel closed once etcd confirmed kw (or kw stopped
// unconfirmed: then its start is MaxInt64); kw.Start may be read after.
// It needs no lock of the owner's.
func (ws *Set) Created(kw *Watch) <-chan struct{} {
	return ws.stream.created(kw)
}

// Current reports whether kw is still one of the set's watches.
func (ws *Set) Current(kw *Watch) bool {
	return kw != nil && ws.m[kw.key] == kw
}

// Halt stops kw's events while it stays in the set, as a lost stream
// would hold them back: tests use it to delay a watch's delivery.
func (ws *Set) Halt(kw *Watch) { ws.stream.stop(kw) }

// watch returns the watch that covers key, starting one if needed, and
// marks it used.
func (ws *Set) watch(key string, prefix bool) *Watch {
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
// confirmed (Created closes), and reads what it may have missed.
func (ws *Set) start(key string, prefix bool) *Watch {
	kw := &Watch{key: key, prefix: prefix}
	ws.m[key] = kw
	ws.stream.add(kw)
	return kw
}

// Sweep stops the watches of the Client's own keys that nothing has used
// for a TTL. It runs after every session renewal.
func (ws *Set) Sweep() {
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
