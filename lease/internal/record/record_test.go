package record

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The kinds round-trip through their key suffixes, and keys no Client
// writes are no records.
func TestKindOf(t *testing.T) {
	const dir = "/fencekit/locks/jobs/"
	for _, k := range []Kind{Exclusive, {Shared: true}, {Limit: 1}, {Limit: 12}} {
		got, ok := KindOf(dir + "00000000000000ab-1f" + k.Suffix())
		assert.True(t, ok, k.String())
		assert.Equal(t, k, got)
	}
	for _, key := range []string{
		dir + "00000000000000ab",       // no slot
		dir + "00000000000000AB-1",     // upper-case hex
		dir + "000000000000ab-1",       // short session id
		dir + "00000000000000ab-",      // empty slot
		dir + "00000000000000ab-1.s0",  // no semaphore of 0
		dir + "00000000000000ab-1.s01", // not the canonical form
		dir + "00000000000000ab-1.x",
		dir + "00000000000000ab-1.d1", // a lock-delay marker
		dir + "notarecord",
	} {
		_, ok := KindOf(key)
		assert.False(t, ok, key)
	}
	assert.Equal(t, "exclusive lock", Exclusive.String())
	assert.Equal(t, "read lock", Kind{Shared: true}.String())
	assert.Equal(t, "semaphore of 3", Kind{Limit: 3}.String())
}

// Values round-trip with and without a payload; values no Client writes
// are refused.
func TestValues(t *testing.T) {
	assert.Equal(t, "tok#2", EncodeValue("tok", 2))
	assert.Equal(t, "tok#1", EncodeValue("tok", 1, ""))
	assert.Equal(t, "tok#1#0:v#w", EncodeValue("tok", 1, "0:v#w"))
	tok, n, payload, ok := Decode([]byte("tok#1#0:v#w"))
	assert.True(t, ok)
	assert.Equal(t, []any{"tok", 1, "0:v#w"}, []any{tok, n, payload})
	for _, v := range []string{"", "tok", "#1", "tok#0", "tok#-1", "tok#01", "tok#x"} {
		_, _, ok := DecodeValue([]byte(v))
		assert.False(t, ok, v)
	}
	since := time.UnixMilli(1765000000123)
	got, value := DecodePayload(EncodePayload(since, "a:b"))
	assert.True(t, got.Equal(since))
	assert.Equal(t, "a:b", value)
	got, value = DecodePayload(EncodePayload(time.Time{}, "v"))
	assert.True(t, got.IsZero())
	assert.Equal(t, "v", value)
}

// The directories of keys, and the prefix rule.
func TestDirs(t *testing.T) {
	key := Dir("/fencekit/locks/", "jobs") + "00000000000000ab-1"
	assert.Equal(t, "/fencekit/locks/jobs/", DirOf(key))
	assert.Equal(t, "jobs", DirName(key))
	assert.Equal(t, "/fencekit/locks//asks/00000000000000ab-42", AskKey("/fencekit/locks/", key, 42))
	p, err := Prefix("/x")
	assert.NoError(t, err)
	assert.Equal(t, "/x/", p)
	for _, bad := range []string{"", "/"} {
		_, err := Prefix(bad)
		assert.Error(t, err, bad)
	}
}

// Readers share with readers, a semaphore admits its first Limit records,
// and kinds that cannot share a lock are refused with ErrMismatch.
func TestAdmissionRules(t *testing.T) {
	const dir = "/fencekit/locks/jobs/"
	kv := func(key string, crev int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(dir + key), CreateRevision: crev}
	}
	readers := []*mvccpb.KeyValue{kv("00000000000000aa-0.r", 3), kv("00000000000000bb-0.r", 4)}
	blockers, need, err := Admission(Kind{Shared: true}, readers, 9)
	assert.NoError(t, err)
	assert.Empty(t, blockers)
	assert.Equal(t, 1, need)
	blockers, _, err = Admission(Exclusive, readers, 9)
	assert.NoError(t, err)
	assert.Len(t, blockers, 2)
	permits := []*mvccpb.KeyValue{kv("00000000000000aa-0.s2", 3)}
	blockers, need, err = Admission(Kind{Limit: 2}, permits, 9)
	assert.NoError(t, err)
	assert.Len(t, blockers, 1)
	assert.Equal(t, 2, need)
	_, _, err = Admission(Kind{Limit: 3}, permits, 9)
	assert.True(t, errors.Is(err, ErrMismatch), "%v", err)
	assert.EqualError(t, err, "lease: lock used with another kind or size: a semaphore of 3 queued behind a semaphore of 2")
	blockers, _, err = Admission(Exclusive, []*mvccpb.KeyValue{kv("foreign", 2)}, 9)
	assert.NoError(t, err)
	assert.Len(t, blockers, 1, "a foreign key blocks like an exclusive record")
}
