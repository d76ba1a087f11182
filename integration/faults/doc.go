// Package faults provides named, reusable faults for testing code that
// holds leases (package lease) and writes to fenced resources (packages
// guard and sqlguard): point them at your own critical sections and check
// that no stale write is accepted.
//
// Every fault is a Fault: a Kind, an Inject that starts it and a Heal that
// ends it; Apply injects, holds and heals one. The kit covers what breaks
// lock-based code in practice:
//
//   - Pause (unix only): a real worker process — the test binary, executed
//     again by StartWorker and dispatched by ServeWorker from TestMain —
//     stopped with SIGSTOP and resumed with SIGCONT, the GC-pause or
//     VM-freeze case. Held past the TTL, the holder wakes up believing it
//     still holds the lock.
//   - Partition, LostReplies and SlowLink: a Proxy between one client and
//     etcd that swallows all traffic, forwards requests but drops replies
//     (outcomes become ambiguous), or delays it.
//   - RevokeHolder and DeleteHolder: the holder's etcd lease is revoked, or
//     its lock record deleted, behind its back.
//   - CrashMember and KillLeader: an etcd member, or whichever is the
//     leader, stops and restarts on Heal. RestartMember stops a member and
//     starts it again at once from its data dir, while holders renew.
//   - SigstopMember and SigstopLeader: a member's process, or the
//     leader's, frozen with SIGSTOP (its connections stay open and answer
//     nothing) and continued with SIGCONT on Heal. SigkillMember and
//     SigkillLeader: killed with SIGKILL (no leadership hand-over) and
//     restarted on Heal. They need a ProcessMember: a member of an
//     etcdtest cluster started with etcdtest.WithBinary.
//   - SwitchMember: a client's links to every member but one are cut and
//     its connections reset, so it reconnects to another member and
//     re-establishes its watches and keep-alives there.
//   - CompactedWatch: a holder partitioned, its record deleted and etcd's
//     history compacted past its watch before the partition heals.
//   - SlowWriter: a holder's write is delivered late, after it gave up and
//     the next holder wrote.
//
// What it does not do: it does not check anything. Record what your
// resource accepted and check it with package check; package etcdtest
// starts the clusters whose members CrashMember and KillLeader stop, and
// gives a client its own proxies. The faults are real — signals, sockets,
// etcd requests — and their timing is not deterministic: a fault injected
// while nobody holds the lock disrupts nothing, so run many and count
// them.
//
// A slow disk on one member is not in the kit: etcd's embed package has no
// hook for storage latency (etcd's own robustness tests delay the disk with
// gofail failpoints, which need an etcd built with failpoints enabled).
// SlowLink in front of one member's clients is the nearest substitute.
//
// A Proxy only sees traffic sent to it: give the client under test the
// proxy's URL instead of the server's. Faults that talk to etcd themselves
// (RevokeHolder, DeleteHolder) need a client that is not behind a proxy the
// test disrupts.
package faults
