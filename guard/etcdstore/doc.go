// Package etcdstore provides a guard.Store that keeps the marks of
// guarded resources in etcd, shared by every replica of a service that
// uses the same key prefix, and surviving restarts.
//
// It is a package of its own so that programs using package guard with a
// guard.MemoryStore do not link the etcd client.
//
// # Guarantees
//
// A mark only rises: [Store.Advance] raises it with a compare-and-swap Txn
// on the key's ModRevision, retrying on conflict, and accepts a token
// equal to the mark on one linearizable read. The one exception is
// [Store.ResetMark], an operator's recovery action that compares the
// exact old mark.
//
// # What it does not do
//
// A check of the mark is not atomic with a write that lands elsewhere:
// see "The window between replicas" in package guard. Data kept in the
// same etcd cluster can close it by comparing [Store.Key] in its own Txn.
// A Store does not verify tokens by itself: give the Guard a verifier
// (guard.WithVerifier) when tokens come from outside the process. With a
// lease.Verifier of the same etcd cluster, [Store.AdvanceVerified]
// compares the token's lock record in the Txn that raises the mark, so
// verification and advance are one atomic step.
package etcdstore
