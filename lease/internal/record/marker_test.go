package record

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestMarkerKeys(t *testing.T) {
	const rec = "/fencekit/locks/jobs/00000000000000ab-1"
	for key, want := range map[string]bool{
		rec + ".d1":    true,
		rec + ".d1f":   true,
		rec + ".d":     false, // no number
		rec + ".dx":    false,
		rec + ".r.d1":  false, // a read lock has no marker
		rec + ".s2.d1": false,
		rec:            false,
		"/fencekit/locks/jobs.d1/00000000000000ab-1": false, // ".d" in the lock name
		"/fencekit/locks/jobs/zz.d1":                 false,
	} {
		got, ok := MarkerRecord(key)
		assert.Equal(t, want, ok, key)
		if ok {
			assert.Equal(t, rec, got)
		}
		if _, isRecord := KindOf(key); ok && isRecord {
			t.Errorf("%s is both a marker and a record", key)
		}
	}
	d, ok := MarkerDelay([]byte(MarkerValue(3 * time.Second)))
	assert.True(t, ok)
	assert.Equal(t, 3*time.Second, d)
	_, ok = MarkerDelay([]byte(EncodeValue("someone", 1)))
	assert.False(t, ok)
	// Older Clients read a marker's value as a record's, so they do not
	// report it as foreign.
	_, _, ok = DecodeValue([]byte(MarkerValue(time.Second)))
	assert.True(t, ok)
	assert.Equal(t, 2*time.Second, RoundUpSeconds(1001*time.Millisecond))
	assert.Equal(t, time.Second, RoundUpSeconds(time.Second))
	assert.EqualValues(t, 3, DelayTTL(2*time.Second))
}

// A waiter skips its own marker, which may sort ahead of its record, and
// waits behind anyone else's.
func TestAdmissionSkipsOwnMarker(t *testing.T) {
	const dir = "/fencekit/locks/jobs/"
	kv := func(key string, crev int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(dir + key), CreateRevision: crev}
	}
	ahead := []*mvccpb.KeyValue{kv("00000000000000aa-0.d1", 5), kv("00000000000000aa-0", 5), kv("00000000000000bb-0.d1", 9)}
	blockers, need, err := Admission(Exclusive, ahead, 9)
	assert.NoError(t, err)
	assert.Equal(t, 1, need)
	assert.Equal(t, map[string]int64{dir + "00000000000000aa-0.d1": 5, dir + "00000000000000aa-0": 5}, blockers)
}
