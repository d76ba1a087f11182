package record

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DelaySlack is added to every lock-delay lease's TTL: it covers the time
// between the renewal (or grant) of a lock-delay lease and the later
// renewal of the session (or delete of the record) it must outlast, and
// whole-second rounding never shortens a delay.
const DelaySlack = time.Second

// A lock-delay marker lives at <record key>.d<n>, n a hex number the
// session never uses twice, so that a marker that outlives its record
// never meets a later record's under a reused key. Its value is
// EncodeValue(markerOwner, 1, d): a value older Clients parse as a
// record's, so they do not report it as foreign while they wait behind it.
const (
	// MarkerSep separates a marker's record key from its number.
	MarkerSep   = ".d"
	markerOwner = "lock-delay"
)

// Mark is an acquisition's lock-delay marker.
type Mark struct {
	Key    string
	Value  string
	Delay  time.Duration
	Shadow clientv3.LeaseID // the session's lock-delay lease it is attached to
}

// Put is the marker's write, in the record's transaction.
func (m *Mark) Put() clientv3.Op {
	return clientv3.OpPut(m.Key, m.Value, clientv3.WithLease(m.Shadow))
}

// MarkerValue is the stored value of a marker of delay d.
func MarkerValue(d time.Duration) string {
	return EncodeValue(markerOwner, 1, d.String())
}

// IsMarker reports whether key is a lock-delay marker's.
func IsMarker(key string) bool {
	_, ok := MarkerRecord(key)
	return ok
}

// MarkerRecord returns the key of the record the marker at key belongs
// to; ok is false if key is not a marker's.
func MarkerRecord(key string) (rec string, ok bool) {
	i := strings.LastIndex(key, MarkerSep)
	if i < 0 || strings.LastIndexByte(key, '/') > i {
		return "", false
	}
	rec, n := key[:i], key[i+len(MarkerSep):]
	if n == "" || !isHex(n) {
		return "", false
	}
	if k, ok := KindOf(rec); !ok || k != Exclusive {
		return "", false
	}
	return rec, true
}

// MarkerDelay returns the delay a marker's value names.
func MarkerDelay(v []byte) (time.Duration, bool) {
	tok, _, payload, ok := Decode(v)
	if !ok || tok != markerOwner {
		return 0, false
	}
	d, err := time.ParseDuration(payload)
	return d, err == nil && d > 0
}

// ForcedMark is the lock-delay marker among kvs (a read of a record's
// markers) of the record created at rev, or nil.
func ForcedMark(kvs []*mvccpb.KeyValue, rev int64) *Mark {
	for _, kv := range kvs {
		d, ok := MarkerDelay(kv.Value)
		if ok && kv.CreateRevision == rev && IsMarker(string(kv.Key)) {
			return &Mark{Key: string(kv.Key), Value: string(kv.Value), Delay: d, Shadow: clientv3.LeaseID(kv.Lease)}
		}
	}
	return nil
}

// MoveMarker moves m from its session's lock-delay lease to a new lease
// of its delay, unless it is on that lease no more (moved or deleted). A
// new lease the marker did not move onto goes to discard, with its TTL.
func MoveMarker(ctx context.Context, etcd *clientv3.Client, m *Mark, discard func(clientv3.LeaseID, time.Duration)) error {
	grant, err := etcd.Grant(ctx, DelayTTL(m.Delay))
	if err != nil {
		return err
	}
	resp, err := etcd.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(m.Key), "=", m.Shadow)).
		Then(clientv3.OpPut(m.Key, m.Value, clientv3.WithLease(grant.ID))).Commit()
	if err != nil || !resp.Succeeded {
		discard(grant.ID, time.Duration(DelayTTL(m.Delay))*time.Second)
	}
	return err
}

// DelayTTL is the TTL, in seconds, of the lease a marker of delay d moves
// to when its countdown starts.
func DelayTTL(d time.Duration) int64 {
	return int64(RoundUpSeconds(d+DelaySlack) / time.Second)
}

// RoundUpSeconds rounds d up to whole seconds, as etcd counts TTLs.
func RoundUpSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// ResolveHead returns the record that heads a queue whose first entry
// (read with HeadRecord) is head: head itself, or, when head is a
// lock-delay marker (which shares its record's creation revision, so
// either may come first), its record if that still exists. It returns
// nil when the queue's head is a marker without its record: the lock is
// in its delay, and nobody holds it. A queue without markers costs no
// request.
func ResolveHead(ctx context.Context, kv clientv3.KV, head *mvccpb.KeyValue) (*mvccpb.KeyValue, error) {
	rec, ok := MarkerRecord(string(head.Key))
	if !ok {
		return head, nil
	}
	resp, err := kv.Get(ctx, rec)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == head.CreateRevision {
		return resp.Kvs[0], nil
	}
	return nil, nil
}

// SessionTTL returns the TTL left of an etcd lease (a session's, or a
// lock-delay lease's), or -1 when it no longer exists.
func SessionTTL(ctx context.Context, etcd clientv3.Lease, id int64) (time.Duration, error) {
	resp, err := etcd.TimeToLive(ctx, clientv3.LeaseID(id))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return -1, nil
	case err != nil:
		return 0, fmt.Errorf("session %x TTL: %w", id, errors.Join(RPCError(err), ctx.Err()))
	case resp.TTL < 0:
		return -1, nil
	}
	return time.Duration(resp.TTL) * time.Second, nil
}
