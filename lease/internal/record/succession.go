package record

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Position returns the index of the record at key in queue (created at
// crev, unless 0), or -1.
func Position(queue []*mvccpb.KeyValue, key string, crev int64) int {
	for i, kv := range queue {
		if string(kv.Key) == key && (crev == 0 || kv.CreateRevision == crev) {
			return i
		}
	}
	return -1
}

// LeaderIndex returns the index in an election's queue q (in creation
// order) of its head's record: 0, or 1 when a lock-delay marker sorts
// ahead of the record it belongs to (they share a creation revision).
func LeaderIndex(q []*mvccpb.KeyValue) int {
	if len(q) > 1 && q[0].CreateRevision == q[1].CreateRevision && IsMarker(string(q[0].Key)) {
		return 1
	}
	return 0
}

// Successor judges, for Term.Transfer and Election.RequestTransfer alike, the candidate
// whose term is rev in an election's queue q (in creation order), led by
// the record at lead: it returns the index of the candidate's record and
// the records a transfer passes over, or the reason why rev names no
// waiting candidate that a transfer could admit. members is what
// the lease package's readSuccessor read at rev. A candidate is an exclusive record, kept by
// a session, of no set, behind the leader, and at most maxSkip
// candidates, and nothing else, queue between the two (the leader's and
// the candidate's own lock-delay markers aside).
func Successor(q []*mvccpb.KeyValue, lead int, rev int64, members []*mvccpb.KeyValue, maxSkip int) (int, []*mvccpb.KeyValue, string) {
	ti := slices.IndexFunc(q, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision == rev && !IsMarker(string(kv.Key)) })
	switch {
	case ti == lead:
		return -1, nil, "it is the leader"
	case ti < 0 && rev > 0 && slices.ContainsFunc(q, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision == rev }):
		return -1, nil, "a lock-delay marker whose record is gone: nobody waits there"
	case ti < lead:
		return -1, nil, "no such candidate waits"
	}
	if reason := whyNoCandidate(q[ti], members); reason != "" {
		return -1, nil, reason
	}
	skipped, reason := passedOver(q, lead, ti, maxSkip)
	if reason != "" {
		return -1, nil, reason
	}
	return ti, skipped, ""
}

// passedOver returns the candidates that a transfer from the leader at
// lead to the candidate at ti passes over, or why it cannot.
func passedOver(q []*mvccpb.KeyValue, lead, ti, maxSkip int) ([]*mvccpb.KeyValue, string) {
	var skipped []*mvccpb.KeyValue
	for _, kv := range q[lead+1 : ti] {
		if kv.CreateRevision == q[ti].CreateRevision || kv.CreateRevision == q[lead].CreateRevision {
			continue // the candidate's or the leader's own marker
		}
		if k, ok := KindOf(string(kv.Key)); !ok || k != Exclusive || kv.Lease == 0 {
			return nil, fmt.Sprintf("the record %s, queued ahead of it, is no candidate's", kv.Key)
		}
		skipped = append(skipped, kv)
	}
	if len(skipped) > maxSkip {
		return nil, fmt.Sprintf("%d candidates queue ahead of it, more than %d", len(skipped), maxSkip)
	}
	return skipped, ""
}

// whyNoCandidate returns why the record kv, which waits in an election's
// queue, is no candidate's, or "" if it is one. members are the keys
// created at its revision (see Successor).
func whyNoCandidate(kv *mvccpb.KeyValue, members []*mvccpb.KeyValue) string {
	k, ok := KindOf(string(kv.Key))
	switch {
	case !ok:
		return fmt.Sprintf("the record %s is no fencekit record", kv.Key)
	case k != Exclusive:
		return fmt.Sprintf("a %s, not a candidate", k)
	case kv.Lease == 0:
		return "its record is kept by no session"
	}
	dir := DirOf(string(kv.Key))
	for _, m := range members {
		if key := string(m.Key); DirOf(key) != dir && !IsMarker(key) {
			if _, ok := KindOf(key); ok {
				return "a member of a set (AcquireAll), not a candidate"
			}
		}
	}
	return ""
}

// SkipKey is the note a transfer leaves for the candidate whose record
// (recordKey, created at rev) it deleted to pass it over: under the
// prefix, in the space of the empty lock name, which no lock can have.
func SkipKey(prefix, recordKey string, rev int64) string {
	return prefix + "/skipped/" + recordKey[strings.LastIndexByte(recordKey, '/')+1:] + "@" + strconv.FormatInt(rev, 10)
}
