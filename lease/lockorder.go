package lease

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

// The package's mutexes, one type per rank. Built with the
// fencekit_lockcheck tag, every Lock checks the order (lockcheck.go);
// otherwise they are sync.Mutex, the checks empty functions the compiler
// removes.
type (
	opMutex       struct{ sync.Mutex }
	grantMutex    struct{ sync.Mutex }
	sessionsMutex struct{ sync.Mutex }
	recordsMutex  struct{ sync.Mutex }
	waiterMutex   struct{ sync.Mutex }
	sessionMutex  struct{ sync.Mutex }
	busyMutex     struct{ sync.Mutex }
	boundMutex    struct{ sync.Mutex }
	streamMutex   struct{ sync.Mutex }
)

func (m *opMutex) Lock()         { acquiring(rankLeaseOp); m.Mutex.Lock() }
func (m *opMutex) Unlock()       { m.Mutex.Unlock(); released(rankLeaseOp) }
func (m *grantMutex) Lock()      { acquiring(rankGrant); m.Mutex.Lock() }
func (m *grantMutex) Unlock()    { m.Mutex.Unlock(); released(rankGrant) }
func (m *sessionsMutex) Lock()   { acquiring(rankSessions); m.Mutex.Lock() }
func (m *sessionsMutex) Unlock() { m.Mutex.Unlock(); released(rankSessions) }
func (m *recordsMutex) Lock()    { acquiring(rankRecords); m.Mutex.Lock() }
func (m *recordsMutex) Unlock()  { m.Mutex.Unlock(); released(rankRecords) }
func (m *waiterMutex) Lock()     { acquiring(rankWaiter); m.Mutex.Lock() }
func (m *waiterMutex) Unlock()   { m.Mutex.Unlock(); released(rankWaiter) }
func (m *sessionMutex) Lock()    { acquiring(rankSession); m.Mutex.Lock() }
func (m *sessionMutex) Unlock()  { m.Mutex.Unlock(); released(rankSession) }
func (m *busyMutex) Lock()       { acquiring(rankBusy); m.Mutex.Lock() }
func (m *busyMutex) Unlock()     { m.Mutex.Unlock(); released(rankBusy) }
func (m *boundMutex) Lock()      { acquiring(rankBound); m.Mutex.Lock() }
func (m *boundMutex) Unlock()    { m.Mutex.Unlock(); released(rankBound) }
func (m *streamMutex) Lock()     { acquiring(rankStream); m.Mutex.Lock() }
func (m *streamMutex) Unlock()   { m.Mutex.Unlock(); released(rankStream) }
