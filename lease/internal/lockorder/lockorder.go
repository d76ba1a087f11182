// Package lockorder is the lease package's one lock order (see
// Concurrency in lease's doc.go): one mutex type per rank, for the
// package's structures to hold. A goroutine that holds a lock takes only
// locks of a higher rank. Built with the fencekit_lockcheck tag, every
// Lock checks the order and panics when it is broken (check.go);
// otherwise the mutexes are sync.Mutex and the checks empty functions the
// compiler removes. Its one door is the mutex types; it is internal to
// the lease module.
package lockorder

import "sync"

// lockRank is a lock's place in the package's one lock order (see
// Concurrency in doc.go): a goroutine that holds a lock takes only locks
// of a higher rank.
type lockRank uint8

const (
	_            lockRank = iota
	rankLeaseOp           // Lease.opMu: one Renew, Reenter, Release or Proclaim at a time
	rankGrant             // sessionSet.grant: one session grant at a time
	rankSessions          // sessionSet.mu: the Client's sessions, closed
	rankRecords           // records.mu: the records table and its watches
	rankWaiter            // waiter.mu: one acquisition's view of its queue
	rankSession           // session.mu: one session's state and key slots
	rankBusy              // busyLocks.mu: locks found taken lately
	rankBound             // boundContexts.mu: the contexts a Lease's end cancels
	rankStream            // watchmux's stream lock: the watches' state on the gRPC stream
)

// The lease package's mutexes, one type per rank, named after the lock
// they are.
type (
	// OpMutex is a Lease's opMu.
	OpMutex struct{ sync.Mutex }
	// GrantMutex is a session set's grant lock.
	GrantMutex struct{ sync.Mutex }
	// SessionsMutex is a session set's mu.
	SessionsMutex struct{ sync.Mutex }
	// RecordsMutex is the records table's mu.
	RecordsMutex struct{ sync.Mutex }
	// WaiterMutex is a waiter's mu.
	WaiterMutex struct{ sync.Mutex }
	// SessionMutex is a session's mu.
	SessionMutex struct{ sync.Mutex }
	// BusyMutex is the busy locks' mu.
	BusyMutex struct{ sync.Mutex }
	// BoundMutex is a Lease's bound contexts' mu.
	BoundMutex struct{ sync.Mutex }
	// StreamMutex is the watch multiplexer's stream lock.
	StreamMutex struct{ sync.Mutex }
)

// Lock locks m, checking the order first.
func (m *OpMutex) Lock() { acquiring(rankLeaseOp); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *OpMutex) Unlock() { m.Mutex.Unlock(); released(rankLeaseOp) }

// Lock locks m, checking the order first.
func (m *GrantMutex) Lock() { acquiring(rankGrant); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *GrantMutex) Unlock() { m.Mutex.Unlock(); released(rankGrant) }

// Lock locks m, checking the order first.
func (m *SessionsMutex) Lock() { acquiring(rankSessions); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *SessionsMutex) Unlock() { m.Mutex.Unlock(); released(rankSessions) }

// Lock locks m, checking the order first.
func (m *RecordsMutex) Lock() { acquiring(rankRecords); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *RecordsMutex) Unlock() { m.Mutex.Unlock(); released(rankRecords) }

// Lock locks m, checking the order first.
func (m *WaiterMutex) Lock() { acquiring(rankWaiter); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *WaiterMutex) Unlock() { m.Mutex.Unlock(); released(rankWaiter) }

// Lock locks m, checking the order first.
func (m *SessionMutex) Lock() { acquiring(rankSession); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *SessionMutex) Unlock() { m.Mutex.Unlock(); released(rankSession) }

// Lock locks m, checking the order first.
func (m *BusyMutex) Lock() { acquiring(rankBusy); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *BusyMutex) Unlock() { m.Mutex.Unlock(); released(rankBusy) }

// Lock locks m, checking the order first.
func (m *BoundMutex) Lock() { acquiring(rankBound); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *BoundMutex) Unlock() { m.Mutex.Unlock(); released(rankBound) }

// Lock locks m, checking the order first.
func (m *StreamMutex) Lock() { acquiring(rankStream); m.Mutex.Lock() }

// Unlock unlocks m.
func (m *StreamMutex) Unlock() { m.Mutex.Unlock(); released(rankStream) }
