package record

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lock record lives at <prefix><name>/<session id>-<slot><kind>, where
// kind is "" for an exclusive record (a Lease, a write lock, an election
// candidate), ".r" for a read lock and ".s<n>" for a permit of a semaphore
// of n. Its value is EncodeValue(owner token, hold count[, payload]) and it
// is attached to the session lease of the Client that wrote it. Records
// under <prefix><name>/ queue in creation-revision order. An exclusive
// record written WithLockDelay has a lock-delay marker next to it,
// <record key>.d<n>, created in the same transaction (so with the same
// creation revision) on another lease of the session: it is no record
// (KindOf rejects it) and blocks everyone but its own record's acquisition
// like an exclusive record (see lease.WithLockDelay and marker.go).

// Dir returns the directory of the records of the lock called name:
// <prefix><name>/.
func Dir(prefix, name string) string {
	return prefix + name + "/"
}

// A lock's queue is the records of its directory in creation order; its
// head, the first of them, holds the lock. QueueKeys and HeadKey read keys
// only (what Admission needs), QueueRecords and HeadRecord values too.

// QueueKeys is the options of a read of a whole queue's keys, plus extra.
func QueueKeys(extra ...clientv3.OpOption) []clientv3.OpOption { return queueRead(true, 0, extra) }

// HeadKey is the options of a read of the key of a queue's head.
func HeadKey() []clientv3.OpOption { return queueRead(true, 1, nil) }

// QueueRecords is the options of a read of a whole queue.
func QueueRecords() []clientv3.OpOption { return queueRead(false, 0, nil) }

// HeadRecord is the options of a read of a queue's head.
func HeadRecord() []clientv3.OpOption { return queueRead(false, 1, nil) }

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

// Admission computes, from the queue ahead of a record of kind k created
// at own (in creation order), the records that block it, and how few of
// them admit it: the admission rule of every kind. It fails with
// ErrMismatch when the queue holds records of a kind k cannot share a lock
// with. The record's own lock-delay marker, created with it, may sort
// ahead of it and is skipped; anyone else's marker blocks like an
// exclusive record (see lease.WithLockDelay).
func Admission(k Kind, ahead []*mvccpb.KeyValue, own int64) (map[string]int64, int, error) {
	blockers := make(map[string]int64, len(ahead))
	for _, kv := range ahead {
		if kv.CreateRevision == own {
			continue // its own marker: only one transaction writes at a revision
		}
		other, ok := KindOf(string(kv.Key))
		switch {
		case !ok:
			// Not a fencekit record: it blocks like an exclusive one (and
			// is reported if it stays; see checkForeign).
		case (k.Limit > 0 || other.Limit > 0) && other != k:
			return nil, 0, mismatch(k, other)
		case k.Shared && other.Shared:
			continue // readers share
		}
		blockers[string(kv.Key)] = kv.CreateRevision
	}
	return blockers, max(k.Limit, 1), nil
}

// Kind says how a record is admitted (see Admission).
type Kind struct {
	Shared bool // a read lock: only exclusive records ahead block it
	Limit  int  // a semaphore permit: admitted among the first Limit records; 0 otherwise
}

// Exclusive is the kind of a Lease's, a write lock's and an election
// candidate's record.
var Exclusive = Kind{}

// Suffix is the end of a record key that names its kind.
func (k Kind) Suffix() string {
	switch {
	case k.Limit > 0:
		return ".s" + strconv.Itoa(k.Limit)
	case k.Shared:
		return ".r"
	}
	return ""
}

// String names the kind in errors: "exclusive lock", "read lock" or
// "semaphore of n".
func (k Kind) String() string {
	switch {
	case k.Limit > 0:
		return fmt.Sprintf("semaphore of %d", k.Limit)
	case k.Shared:
		return "read lock"
	}
	return "exclusive lock"
}

// KindOf returns the kind of the record at key; ok is false for a key that
// no fencekit Client writes.
func KindOf(key string) (Kind, bool) {
	base := key[strings.LastIndexByte(key, '/')+1:]
	id, suffix, _ := strings.Cut(base, ".")
	sess, slot, found := strings.Cut(id, "-")
	if !found || len(sess) != 16 || !isHex(sess) || slot == "" || !isHex(slot) {
		return Kind{}, false
	}
	switch {
	case suffix == "" && !strings.Contains(base, "."):
		return Exclusive, true
	case suffix == "r":
		return Kind{Shared: true}, true
	case strings.HasPrefix(suffix, "s"):
		n, err := strconv.Atoi(suffix[1:])
		if err != nil || n < 1 || strconv.Itoa(n) != suffix[1:] {
			return Kind{}, false
		}
		return Kind{Limit: n}, true
	}
	return Kind{}, false
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
func mismatch(k, other Kind) error {
	return fmt.Errorf("%w: a %s queued behind a %s", ErrMismatch, k, other)
}

// DirOf returns the directory of a record key: <prefix><name>/.
func DirOf(key string) string {
	return key[:strings.LastIndexByte(key, '/')+1]
}

// DirName returns the lock name of a record key.
func DirName(key string) string {
	d := strings.TrimSuffix(DirOf(key), "/")
	return d[strings.LastIndexByte(d, '/')+1:]
}

// EncodeValue is the stored value of a lock record: the owner token and the
// hold count, then, if not empty, a payload (an election candidate's
// public value). Owner tokens never contain '#'.
func EncodeValue(tok string, count int, payload ...string) string {
	v := tok + "#" + strconv.Itoa(count)
	if len(payload) > 0 && payload[0] != "" {
		v += "#" + payload[0]
	}
	return v
}

// DecodeValue parses a record's value; ok is false for a value that no
// fencekit Client wrote.
func DecodeValue(v []byte) (tok string, count int, ok bool) {
	tok, count, _, ok = Decode(v)
	return tok, count, ok
}

// Decode parses a record's value, payload included.
func Decode(v []byte) (tok string, count int, payload string, ok bool) {
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

// EncodePayload is an election record's payload: when its term began
// (Unix milliseconds, 0 while unknown) and its public value.
func EncodePayload(since time.Time, value string) string {
	ms := int64(0)
	if !since.IsZero() {
		ms = since.UnixMilli()
	}
	return strconv.FormatInt(ms, 10) + ":" + value
}

// DecodePayload parses a payload written by EncodePayload.
func DecodePayload(p string) (since time.Time, value string) {
	ms, value, ok := strings.Cut(p, ":")
	if !ok {
		return time.Time{}, ""
	}
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil && n > 0 {
		since = time.UnixMilli(n)
	}
	return since, value
}

// Prefix is the key prefix of a Client's records, prefix, refused when
// empty, with a "/" appended when missing.
func Prefix(prefix string) (string, error) {
	if prefix == "" || prefix == "/" {
		return "", errors.New("lease: empty key prefix")
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return prefix, nil
}
