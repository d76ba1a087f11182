// Package watchmux carries all of a lease.Client's key watches on one
// gRPC Watch stream of its etcd connection, and keeps, per key, the one
// watch the Client needs of it.
//
// Its one door back to the lease package is Sink: every change of a
// watched key, in revision order per watch, and, after a watch's events
// were compacted away, what a read of its keys found. The package knows
// nothing of leases, waiters or orphans; the lease package's records
// table is the one Sink.
//
// It guarantees that a confirmed watch delivers every event after its
// start revision exactly once, across lost streams (a watch resumes after
// the last event it delivered) and compactions (Sink.Resync); it does not
// guarantee how soon. It is internal to the lease module: its API changes
// with the lease package's needs.
package watchmux
