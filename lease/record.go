package lease

import (
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lock record lives at <prefix><name>/<session id>-<slot><kind>, where
// kind is "" for an exclusive record (a Lease, a write lock, an election
// candidate), ".r" for a read lock and ".s<n>" for a permit of a semaphore
// of n. Its value is encodeValue(owner token, hold count[, payload]) and it
// is attached to the session lease of the Client that wrote it. Records
// under <prefix><name>/ queue in creation-revision order. An exclusive
// record written WithLockDelay has a lock-delay marker next to it,
// <record key>.d<n>, created in the same transaction (so with the same
// creation revision) on another lease of the session: it is no record
// (kindOf rejects it) and blocks everyone but its own record's acquisition
// like an exclusive record (see WithLockDelay and lockdelay.go).

// lockDir returns the directory of the records of the lock called name:
// <prefix><name>/.
func lockDir(prefix, name string) string {
	return prefix + name + "/"
}

// A lock's queue is the records of its directory in creation order; its
// head, the first of them, holds the lock. queueKeys and headKey read keys
// only (what admission needs), queueRecords and headRecord values too.
func queueKeys(extra ...clientv3.OpOption) []clientv3.OpOption { return queueRead(true, 0, extra) }
func headKey() []clientv3.OpOption                             { return queueRead(true, 1, nil) }
func queueRecords() []clientv3.OpOption                        { return queueRead(false, 0, nil) }
func headRecord() []clientv3.OpOption                          { return queueRead(false, 1, nil) }

// queueRead is the options of a read of a queue: the first limit records
// (all of them if 0), with keys only if keysOnly, and extra.
func queueRead(keysOnly bool, limit int64, extra []clientv3.OpOption) []clientv3.OpOption {
	opts := make([]clientv3.OpOption, 0, 4+len(extra))
	opts = append(opts, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(limit))
	}
	return append(opts, extra...)
}

// admission computes, from the queue ahead of a record of kind k created
// at own (in creation order), the records that block it, and how few of
// them admit it: the admission rule of every kind. It fails with
// ErrMismatch when the queue holds records of a kind k cannot share a lock
// with. The record's own lock-delay marker, created with it, may sort
// ahead of it and is skipped; anyone else's marker blocks like an
// exclusive record (see WithLockDelay).
func admission(k recordKind, ahead []*mvccpb.KeyValue, own int64) (map[string]int64, int, error) {
	blockers := make(map[string]int64, len(ahead))
	for _, kv := range ahead {
		if kv.CreateRevision == own {
			continue // its own marker: only one transaction writes at a revision
		}
		other, ok := kindOf(string(kv.Key))
		switch {
		case !ok:
			// Not a fencekit record: it blocks like an exclusive one (and
			// is reported if it stays; see checkForeign).
		case (k.limit > 0 || other.limit > 0) && other != k:
			return nil, 0, mismatch(k, other)
		case k.shared && other.shared:
			continue // readers share
		}
		blockers[string(kv.Key)] = kv.CreateRevision
	}
	return blockers, max(k.limit, 1), nil
}

// recordKind says how a record is admitted (see admission).
type recordKind struct {
	shared bool // a read lock: only exclusive records ahead block it
	limit  int  // a semaphore permit: admitted among the first limit records; 0 otherwise
}

var exclusive = recordKind{}

// suffix is the end of a record key that names its kind.
func (k recordKind) suffix() string {
	switch {
	case k.limit > 0:
		return ".s" + strconv.Itoa(k.limit)
	case k.shared:
		return ".r"
	}
	return ""
}

func (k recordKind) String() string {
	switch {
	case k.limit > 0:
		return fmt.Sprintf("semaphore of %d", k.limit)
	case k.shared:
		return "read lock"
	}
	return "exclusive lock"
}

// kindOf returns the kind of the record at key; ok is false for a key that
// no fencekit Client writes.
func kindOf(key string) (recordKind, bool) {
	base := key[strings.LastIndexByte(key, '/')+1:]
	id, suffix, _ := strings.Cut(base, ".")
	sess, slot, found := strings.Cut(id, "-")
	if !found || len(sess) != 16 || !isHex(sess) || slot == "" || !isHex(slot) {
		return recordKind{}, false
	}
	switch {
	case suffix == "" && !strings.Contains(base, "."):
		return exclusive, true
	case suffix == "r":
		return recordKind{shared: true}, true
	case strings.HasPrefix(suffix, "s"):
		n, err := strconv.Atoi(suffix[1:])
		if err != nil || n < 1 || strconv.Itoa(n) != suffix[1:] {
			return recordKind{}, false
		}
		return recordKind{limit: n}, true
	}
	return recordKind{}, false
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// mismatch is the error of a record of kind k queued behind one of kind
// other that it cannot share a lock with.
func mismatch(k, other recordKind) error {
	return fmt.Errorf("%w: a %s queued behind a %s", ErrMismatch, k, other)
}

// dirOf returns the directory of a record key: <prefix><name>/.
func dirOf(key string) string {
	return key[:strings.LastIndexByte(key, '/')+1]
}

// dirName returns the lock name of a record key.
func dirName(key string) string {
	d := strings.TrimSuffix(dirOf(key), "/")
	return d[strings.LastIndexByte(d, '/')+1:]
}

// encodeValue is the stored value of a lock record: the owner token and the
// hold count, then, if not empty, a payload (an election candidate's
// public value). Owner tokens never contain '#'.
func encodeValue(tok string, count int, payload ...string) string {
	v := tok + "#" + strconv.Itoa(count)
	if len(payload) > 0 && payload[0] != "" {
		v += "#" + payload[0]
	}
	return v
}

// decodeValue parses a record's value; ok is false for a value that no
// fencekit Client wrote.
func decodeValue(v []byte) (tok string, count int, ok bool) {
	tok, count, _, ok = decodeRecord(v)
	return tok, count, ok
}

// decodeRecord parses a record's value, payload included.
func decodeRecord(v []byte) (tok string, count int, payload string, ok bool) {
	tok, rest, found := strings.Cut(string(v), "#")
	if !found || tok == "" {
		return "", 0, "", false
	}
	n, payload, _ := strings.Cut(rest, "#")
	count, err := strconv.Atoi(n)
	if err != nil || count <= 0 || strconv.Itoa(count) != n {
		return "", 0, "", false
	}
	return tok, count, payload, true
}
