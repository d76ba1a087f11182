// Package admin holds the operator's tools over the lock records that
// lease.Clients keep in etcd: it reads any lock's holder and queue
// (Admin.Inspect, Admin.InspectAll), asks a holder to let go
// (Admin.RequestRelease) and deletes a holder's record
// (Admin.ForceRelease). "fencekit status" and "fencekit release" are built
// on it.
//
// An Admin is made like a lease.Verifier, from an etcd client and the
// prefix of the Clients' records (New); it has no session and holds
// nothing, so a tool needs no lease.Client of its own. A process that
// holds locks passes its Client's prefix (lease.Client.Prefix).
//
// It guarantees that each change compares the record it acts on in one
// etcd transaction (its creation revision, never the key alone), so a
// holder that took over meanwhile is never touched, and that what it
// reports never carries an owner token (only its digest). It does not
// guarantee that what Inspect read still holds when the caller looks at
// it, nor that ForceRelease stops the old holder's side effects: a paused
// or partitioned holder keeps running until it notices, and only fencing
// at the resource stops its writes.
package admin
