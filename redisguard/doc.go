// Package redisguard makes Redis itself refuse writes that carry a stale
// fencing token: a batch of commands on a resource's keys runs only if
// the token is its lock's and equal to or newer than the resource's mark,
// and the check, the commands and the mark's advance are one Lua function
// run by the server, so nothing lands between them. It also provides a
// guard.Store whose marks live in Redis, so that replicas of an HTTP or
// gRPC service (package guard) share them.
//
// It is a Go module of its own (github.com/fencekit/fencekit/redisguard)
// so that only programs that use it link go-redis
// (github.com/redis/go-redis/v9). It takes any redis.UniversalClient
// (standalone, Cluster, Sentinel failover, Ring), needs Redis 7.0 or later
// (Redis functions), and is tested with Redis 7.0: standalone, as a
// one-node Cluster through redis.ClusterClient, and as a redis.Ring of two
// servers.
//
// # Fenced writes
//
// [Guard.Exec] takes a guard.Target (the resource and the lock bound to
// it), the token and the commands ([Set] with EX, PX, KEEPTTL, NX or XX;
// [HSet]; [Del]; [IncrBy]; and the generic [Command] for a fixed
// allow-list of single-key writes); [Guard.Set], [Guard.HSet],
// [Guard.Del] and [Guard.IncrBy] are the one-command shapes:
//
//	n, err = g.IncrBy(ctx, tgt, b, total, 5)
//	...
//	_, err = g.IncrBy(ctx, tgt, a, total, 10)
//	var stale *fence.RefusedError
//	if errors.As(err, &stale) {
//
// The rule is package guard's: a resource accepts a token of its lock
// equal to its mark (the holder writing again) or newer (and raises the
// mark to it), and refuses an older one (fence.ErrStale; the error holds
// the mark) and one of another lock (fence.ErrWrongLock). Revisions are
// compared exactly, as decimal strings. Refusals are the module's one
// refusal, a *fence.RefusedError (matching fence.ErrStale,
// fence.ErrWrongLock, fence.ErrInvalid or fence.ErrUnverified), and bad
// input is refused before anything is
// sent: [ErrBadCommand], [ErrCrossSlot]. When Redis refuses a command
// while the script runs it (WRONGTYPE, an INCRBY of text), the script
// undoes the batch's earlier commands (DUMP before, RESTORE after) and
// leaves the mark alone: [*CommandError], nothing changed.
//
// Commands are data: the script's text is fixed, and names, keys and
// arguments reach it as KEYS and ARGV, checked against the allow-list
// (see [Command] for the list and why it is fixed). The script is a Redis
// function, run with FCALL; the package loads its library (FUNCTION LOAD,
// on a cluster into the master of the mark's slot, on a Ring into every
// shard) when the server does not have it: a new server, a restart
// without persistence, FUNCTION FLUSH. The library's name ends in a digest
// of its code ("fencekit_" and 12 hex digits), so programs built with
// different versions of this package load libraries of their own and do
// not replace each other's; a library of a version no longer used can be
// removed with FUNCTION DELETE. A batch of several commands snapshots each
// key it touches (DUMP and PTTL) before changing it, to undo the batch
// when a later command fails: keep such batches to small keys; a single
// command needs no snapshot. Values pass through the server's Lua, copied
// in and out, so large values cost more (BenchmarkRedis; the figures are
// in https://github.com/fencekit/fencekit/blob/main/redisguard/README.md#cost).
// With Redis ACLs, the user needs FCALL, FUNCTION LOAD, INFO, HMGET, HSET,
// DUMP, PTTL, RESTORE and DEL besides the batch's commands.
//
// # Keys and Redis Cluster
//
// The mark of resource r is a hash at prefix + "{r}" ([DefaultPrefix] for
// a Guard), whose hash tag is the resource name; [Key](r, name) returns
// "{r}:name", a data key in the same hash slot. A script may only touch
// keys of one slot on a cluster, so every key of a fenced write must be
// in its mark's slot, on a cluster or not: [ErrCrossSlot] otherwise,
// computed with [Slot] (CRC16 as the cluster specification defines it)
// before sending. Resource names must not contain "{" or "}".
//
// # Durability
//
// A Redis server that restarts without persistence forgets every mark;
// one restored from an RDB snapshot or an AOF written with appendfsync
// everysec can bring back marks older than the last advances; a replica
// promoted after a failover can miss the last advances too. A superseded
// holder would then pass the check again. So each mark records the
// run_id of the server process that wrote it (its "life"), and a resource
// without a mark of the current life is unclaimed: every write is refused
// ([ErrUnclaimed], which also matches fence.ErrNoMark) until the lock's
// current holder claims it again:
//
//   - with a verifier ([WithVerifier], a lease.Verifier), a write finds
//     the resource unclaimed, asks the verifier afresh whether its token
//     is the lock's current holder's, and claims and writes in one script
//     if it is (a superseded holder is refused, fence.ErrUnverified);
//   - without one, [Guard.Claim] (or [Store.Claim]) claims: call it right
//     after acquiring the lock, never from code that may run late.
//
// A token older than a mark of an earlier life is still refused as
// stale. The same rule makes the first write of a new resource a claim,
// and a restart or a failover costs one verification per resource (or a
// Claim). Marks must not be evicted: run Redis with maxmemory-policy
// noeviction or a volatile-* policy (marks have no TTL).
//
// The script learns the server's run_id from INFO server once per loaded
// copy of its library, not once per write (BenchmarkRedis, arm info,
// prices what that saves), and keeps it in a local variable of the
// library. That is as safe as reading INFO every time, because the kept
// value cannot outlive the process that read it: it lives only in the
// server's memory, in the running copy of the library, which starts
// empty whenever the server loads the library (when it starts, on
// FUNCTION LOAD, RESTORE or FLUSH, on a full sync from a master).
// Snapshots, the AOF and replication carry the library's code, never its
// variables, so a restarted server, one restored from a snapshot and a
// promoted replica all read their own run_id again at their first fenced
// write, and find the marks they brought back stamped with another life
// (a test restarts a server from a snapshot saved before a successor's
// claim to check it). Two things keep a run_id that the data may no
// longer match, with or without the kept value: an older snapshot loaded
// into the running process (DEBUG RELOAD NOSAVE) and a server that was
// demoted to a replica and promoted again without restarting. Do not use
// the first in production, and restart a demoted master before it can be
// promoted again.
//
// # The verification window
//
// With [WithVerifier], the Guard verifies a token before it first raises
// a mark (once per acquisition: it remembers per lock the last token it
// verified, as sqlguard does) and before every claim. The verification
// (an etcd read) and the script are two steps: between them the holder
// may lose its lease and a successor acquire the lock, and the mark can
// then rise to the token that was current at the check. That token was
// issued by the lock service; the successor's is newer, and once the
// successor writes or claims, the superseded holder is refused as stale:
// the guarantee of package guard's MemoryStore with a verifier. A forged
// token, a waiter's, another cluster's or one whose lease had ended
// before the check cannot raise a mark. [Store.AdvanceVerified], which a
// guard.Guard with a verifier calls, has the same window.
//
// Unlike guard with replicas (guard's "The window between replicas"),
// fenced writes have no window between the check and the write: both are
// in the script. A Store used through guard.Guard keeps guard's window:
// the check is in Redis, the write is the handler's.
//
// # What it does not do
//
//   - Writes that skip the Guard (plain client calls, other scripts) are
//     not fenced.
//   - It does not make Redis durable: a write acknowledged before a crash
//     can be lost with the data; fencing only keeps a superseded holder
//     from writing after it.
//   - Replies of the batch are returned only when it ran; a call whose
//     connection broke after sending has an unknown outcome (a Redis
//     error), as any Redis call.
//   - Without a verifier any token newer than the mark raises it, as in
//     guard and sqlguard.
//
// # Observability
//
// [WithMetrics] counts every call in
// fencekit_redisguard_decisions_total{op,outcome} with the outcome words
// of guard and sqlguard (accepted, stale, wrong_lock, malformed, invalid,
// unverified, not_found for an unclaimed resource, failed); [WithLogger]
// logs with lease's field names ("lock" is a hash of the lock name, never
// the name); [WithTracerProvider] adds "fencekit.redisguard.<op>" spans.
// A Store adds none of its own: the guard.Guard using it counts, logs and
// traces its decisions.
package redisguard
