package lease

import (
	"github.com/fencekit/fencekit/lease/internal/watchmux"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The Client's watches live in package watchmux, behind one door: the
// records table, as an eventSink, receives every change of a watched key
// and, after events were compacted away, what a read of the watched keys
// found. The watch layer knows nothing of leases, waiters or orphans.

// keyWatch is one of the Client's watches (see watchmux.Watch).
type keyWatch = watchmux.Watch

// eventSink is the records table as the watches' sink.
type eventSink records

// Put applies a write of kv (see records.put).
func (s *eventSink) Put(kv *mvccpb.KeyValue) { (*records)(s).put(kv) }

// Deleted applies a delete of key at revision rev (see records.deleted).
func (s *eventSink) Deleted(key string, rev int64) { (*records)(s).deleted(key, rev) }

// Resync applies a read of the watched keys at revision at (see
// records.resync).
func (s *eventSink) Resync(covers func(string) bool, present map[string]*mvccpb.KeyValue, at int64) bool {
	return (*records)(s).resync(covers, present, at)
}
