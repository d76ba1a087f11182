package lease

import (
	"github.com/fencekit/fencekit/lease/internal/watchmux"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// keyWatch is one of the Client's watches, which package watchmux keeps.
type keyWatch = watchmux.Watch

// eventSink is the watches' one door into the package: the records table,
// receiving every change of a watched key and, after events were
// compacted away, what a read of the watched keys found.
type eventSink records

// Put, Deleted and Resync implement watchmux.Sink: see records.put,
// records.deleted and records.resync.
func (s *eventSink) Put(kv *mvccpb.KeyValue)       { (*records)(s).put(kv) }
func (s *eventSink) Deleted(key string, rev int64) { (*records)(s).deleted(key, rev) }
func (s *eventSink) Resync(covers func(string) bool, present map[string]*mvccpb.KeyValue, at int64) bool {
	return (*records)(s).resync(covers, present, at)
}
