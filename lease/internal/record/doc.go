// Package record is the lease package's record format and the reads and
// rules built on it alone: where a lock's records live and how their keys
// and values are written (kind, owner token, hold count, payload), the
// lock-delay marker that may sit next to a record, the key of a request to
// release, the etcd reads of a lock's queue, the admission rule that
// decides, from the queue ahead of a record, whether it holds the lock,
// and the succession rule that decides which waiting candidate a term can
// be transferred to.
//
// It holds no state: every function is pure or one etcd request. Its door
// is the format itself: the lease package writes records, and everything
// that reads them (lease.Verifier, the lease/admin tools, elections)
// parses them here, so that a record written by one Client is read the
// same way by all. It is internal to the lease module: its API changes
// with the lease package's needs; the on-disk format it defines does not.
package record
