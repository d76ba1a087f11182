package lease

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/lease/internal/lifetime"
	"github.com/fencekit/fencekit/lease/internal/lockorder"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is one etcd lease of a Client, to which the records of its
// acquisitions are attached. Its mutable fields are its own, guarded by
// its mu (see the lock order in doc.go). A session ends once (finish): the
// Client ends it under the records table's lock, so that whoever checks
// err and registers a lease under that lock cannot miss its end.
type session struct {
	id     clientv3.LeaseID
	keyID  string // id as record keys carry it: 16 hex digits and a dash
	ttl    time.Duration
	margin time.Duration
	fin    lifetime.End // the session's end

	mu         lockorder.SessionMutex
	validUntil time.Time
	timer      *time.Timer
	slots      map[string]struct{} // record keys in use (see claimSlot)
	// shadows are the session's lock-delay leases, one per delay (see
	// WithLockDelay), granted on first use; markers counts the markers
	// written, to name the next (see record.Mark).
	shadows map[time.Duration]clientv3.LeaseID
	markers uint64

	// uncertain counts the orphans of this session whose write may still
	// be applied later by etcd (its request went out and no reply came
	// back), so that their record could appear after their acquisition
	// gave up. The Client deletes such a record whenever its watch sees it
	// appear, until the session ends. Once there are maxUncertain of them
	// the session is tainted: new acquisitions use a new session, and this
	// one is revoked as soon as it holds and waits for nothing. The revoke
	// deletes any such record, and a write that arrives after it fails
	// because the lease is gone.
	uncertain int
	tainted   bool
	// bound is how many record keys s may have in use (see claimSlots);
	// full is set once a claim reached it or would pass it. A full session
	// is healthy: it keeps renewing its records, but new acquisitions use
	// another session, and it is revoked as soon as it holds and waits for
	// nothing, as a tainted one is. Full stays set: s never takes new
	// records again.
	bound int
	full  bool
	// idle counts the renewals in a row at which s had no record key in
	// use and had claimed none since the renewal before (claimed); a
	// session of a TTL other than the Client's is closed to new
	// acquisitions once idle reaches its limit (idleOut, see idleRenewal)
	// and revoked as a full one is. idleOut stays set.
	idle    int
	claimed bool
	idleOut bool

	// deleted are held leases whose records the watch saw deleted, while
	// a goroutine asks etcd whether the session itself is gone.
	deleted  []*Lease
	checking bool
}

// failure returns why s ended, or nil while it lasts.
func (s *session) failure() error {
	return s.fin.Err()
}

// finish ends s with cause, and reports whether this call ended it.
func (s *session) finish(cause error) bool {
	if !s.fin.End(cause) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	return true
}

// cause is the error of an acquisition whose session ended.
func (s *session) cause() error {
	err := s.failure()
	if errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("session ended while waiting: %w", err)
}

// until returns the end of s's validity.
func (s *session) until() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// extend moves s's validity deadline forward to until.
func (s *session) extend(until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fin.Err() == nil && until.After(s.validUntil) {
		s.validUntil = until
	}
}

// armDeadline starts the timer that calls expire at s's validity
// deadline.
func (s *session) armDeadline(expire func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = time.AfterFunc(time.Until(s.validUntil), expire)
}

// pastDeadline reports whether s's validity deadline has passed; if a
// renewal moved it meanwhile, it re-arms the timer instead. An ended
// session is not past anything.
func (s *session) pastDeadline() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fin.Err() != nil {
		return false
	}
	if d := time.Until(s.validUntil); d > 0 {
		s.timer.Reset(d)
		return false
	}
	return true
}

// slotReq is the lock of one record an acquisition is to write: its
// directory and its kind's key suffix.
type slotReq struct{ dir, suffix string }

// claimSlots returns the record keys of an acquisition's new records, one
// per lock of reqs: <dir><session id>-<slot><suffix>, with the lowest slot
// this session is not using. Reusing keys, rather than writing a new one
// per acquisition, keeps etcd's key index for the lock from growing with
// every acquisition until the next compaction (each read of the queue
// would scan it). A key is freed only once its record is known to be gone
// for good.
//
// ok is false, and nothing is claimed, when s must not take them: it is
// tainted, full, or the keys would pass its bound (unless s has none in
// use, so that a set larger than the bound still finds a session). s is
// full from then on, and also once a claim reaches the bound.
func (s *session) claimSlots(reqs []slotReq) (keys []string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tainted || s.full || s.idleOut {
		return nil, false
	}
	if len(s.slots) > 0 && len(s.slots)+len(reqs) > s.bound {
		s.full = true
		return nil, false
	}
	keys = make([]string, len(reqs))
	for j, r := range reqs {
		for i := 0; ; i++ {
			key := r.dir + s.keyID + strconv.FormatInt(int64(i), 16) + r.suffix
			if _, used := s.slots[key]; !used {
				s.slots[key] = struct{}{}
				keys[j] = key
				break
			}
		}
	}
	if len(s.slots) >= s.bound {
		s.full = true
	}
	s.claimed = true
	return keys, true
}

// freeSlot lets a later acquisition reuse key: its record is gone.
func (s *session) freeSlot(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.slots, key)
}

// addUncertain counts one more orphan whose write may still apply, and
// reports whether s is tainted now.
func (s *session) addUncertain() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uncertain++
	if s.uncertain >= maxUncertain {
		s.tainted = true
	}
	return s.tainted
}

// retirable reports whether s is closed to new acquisitions (tainted,
// full or idle too long) and has not ended.
func (s *session) retirable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return (s.tainted || s.full || s.idleOut) && s.fin.Err() == nil
}

// closedToNew reports whether new acquisitions must use another session:
// s is tainted, full or idle too long.
func (s *session) closedToNew() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tainted || s.full || s.idleOut
}

// idleRenewal counts a renewal of s, and reports whether s has now been
// idle at limit renewals in a row (no record key in use at each, none
// claimed since the one before), in which case s is closed to new
// acquisitions from now on. A key claimed but not yet written counts as
// in use: claimSlots marks it before the acquisition writes.
func (s *session) idleRenewal(limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.slots) > 0 || s.claimed {
		s.idle, s.claimed = 0, false
		return false
	}
	s.idle++
	if s.idle < limit {
		return false
	}
	s.idleOut = true
	return true
}

// noteDeleted adds l to the leases whose records were seen deleted, and
// reports whether the caller must start the check of whether s is gone.
func (s *session) noteDeleted(l *Lease) (check bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted = append(s.deleted, l)
	if s.checking {
		return false
	}
	s.checking = true
	return true
}

// takeDeleted returns the leases noted by noteDeleted, and ends the check.
func (s *session) takeDeleted() []*Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.deleted
	s.deleted, s.checking = nil, false
	return ls
}

// maxUncertain is how many orphans whose write may still apply a session
// keeps before the Client retires it (see session.tainted).
const maxUncertain = 32

// maxSessionRecords bounds the record keys a session has in use (see
// session.full): when a Client dies, or a session ends, etcd deletes every
// key attached to the session's lease in one transaction, during which
// no other write of the cluster applies; the bound keeps that transaction
// small (kube-apiserver caps its leases at 1,000 attached keys for this
// reason, kubernetes#96836). Measured on one embedded etcd member (a
// loaded 2-core machine, an unrelated client putting a key in a loop), the
// revoke of a lease with 1,000 keys took 3.5 ms and the longest put 6 ms,
// as with 100 keys; with 10,000 keys 112 ms and 108 ms, with 100,000
// 1.17 s and 1.17 s: the stall grows faster than the keys. The bound costs
// one more session lease, renewed every third of its TTL, per thousand
// records.
const maxSessionRecords = 1000

// maxSessionIdle is how long a session of a TTL other than the Client's
// (see WithLeaseTTL) stays granted, and renewed, while it holds and waits
// for nothing: after that long without a record (and at least three
// renewals) it is revoked, and the next acquisition with its TTL grants a
// new one. The Client's own session is kept while the Client is open.
const maxSessionIdle = time.Minute

// errRetired ends a tainted, full or idle session that nothing uses any
// more.
var errRetired = errors.New("lease: session retired")

// shadow returns s's lock-delay lease for delay d, if it has one.
func (s *session) shadow(d time.Duration) (clientv3.LeaseID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.shadows[d]
	return id, ok
}

// addShadow makes id s's lock-delay lease for d, unless s has one already
// or has ended, and returns the one to use; kept reports whether id is it.
func (s *session) addShadow(d time.Duration, id clientv3.LeaseID) (use clientv3.LeaseID, kept bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.shadows[d]; ok {
		return cur, false
	}
	if s.fin.Err() != nil {
		return id, false
	}
	if s.shadows == nil {
		s.shadows = map[time.Duration]clientv3.LeaseID{}
	}
	s.shadows[d] = id
	return id, true
}

// dropShadow forgets s's lock-delay lease id for d, which no longer exists.
func (s *session) dropShadow(d time.Duration, id clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shadows[d] == id {
		delete(s.shadows, d)
	}
}

// shadowList returns a copy of s's lock-delay leases, or nil.
func (s *session) shadowList() map[time.Duration]clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.shadows) == 0 {
		return nil
	}
	m := make(map[time.Duration]clientv3.LeaseID, len(s.shadows))
	for d, id := range s.shadows {
		m[d] = id
	}
	return m
}

// nextMarker returns the number of s's next lock-delay marker, in hex.
func (s *session) nextMarker() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markers++
	return strconv.FormatUint(s.markers, 16)
}
