package record

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Which waiting record a term can pass to, and why not.
func TestSuccessor(t *testing.T) {
	const dir = "/fencekit/locks/lead/"
	kv := func(key string, crev, lease int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(dir + key), CreateRevision: crev, Lease: lease}
	}
	q := []*mvccpb.KeyValue{
		kv("00000000000000aa-0.d1", 5, 7), // the leader's marker, sorted ahead of it
		kv("00000000000000aa-0", 5, 1),
		kv("00000000000000bb-0", 6, 2),
		kv("00000000000000cc-0", 7, 3),
		kv("00000000000000dd-0.r", 8, 4),
		kv("00000000000000ee-0", 9, 5),
		kv("00000000000000ff-0", 10, 0),
		kv("00000000000000ab-0.d1", 11, 6), // a marker whose record is gone
	}
	lead := LeaderIndex(q)
	assert.Equal(t, 1, lead)
	assert.Equal(t, 2, Position(q, dir+"00000000000000bb-0", 6))
	assert.Equal(t, -1, Position(q, dir+"00000000000000bb-0", 7))

	ti, skipped, reason := Successor(q, lead, 7, nil, 50)
	assert.Equal(t, "", reason)
	assert.Equal(t, 3, ti)
	assert.Equal(t, []*mvccpb.KeyValue{q[2]}, skipped)
	_, _, reason = Successor(q, lead, 7, nil, 0)
	assert.Equal(t, "1 candidates queue ahead of it, more than 0", reason)
	for rev, want := range map[int64]string{
		5:  "it is the leader",
		4:  "no such candidate waits",
		11: "a lock-delay marker whose record is gone: nobody waits there",
		8:  "a read lock, not a candidate",
		10: "its record is kept by no session",
		9:  "the record " + dir + "00000000000000dd-0.r, queued ahead of it, is no candidate's",
	} {
		_, _, reason := Successor(q, lead, rev, nil, 50)
		assert.Equal(t, want, reason, "rev %d", rev)
	}
	member := &mvccpb.KeyValue{Key: []byte("/fencekit/locks/other/00000000000000bb-1"), CreateRevision: 6}
	_, _, reason = Successor(q, lead, 6, []*mvccpb.KeyValue{q[2], member}, 50)
	assert.Equal(t, "a member of a set (AcquireAll), not a candidate", reason)
	assert.Equal(t, "/fencekit/locks//skipped/00000000000000bb-0@6", SkipKey("/fencekit/locks/", dir+"00000000000000bb-0", 6))
}
