// Package integration holds fencekit's tests against real embedded etcd
// clusters, and its Jepsen-style safety suite; it exports nothing. What
// it is built from is public, for testing your own critical sections: the
// embedded clusters in package etcdtest, the faults in package faults and
// the history checker in package check.
//
// # The safety suite
//
// TestSafety runs workers that repeatedly acquire leases and do
// read-modify-write cycles, with random think time, on shared resources:
//
//   - register: in-memory sets behind guard's HTTP middleware, served by
//     an httptest.Server (every method fenced, so the first read of a new
//     holder raises the mark, as guard.Claim would; new tokens verified
//     against etcd with lease.Verifier);
//   - sql-sqlite always, and sql-postgresql and sql-mysql or sql-mariadb
//     (named after the server that answers) when FENCEKIT_PG_DSN and
//     FENCEKIT_MYSQL_DSN are set (FENCEKIT_REQUIRE_DB=1 makes them
//     mandatory): rows holding sets, written through sqlguard (Claim
//     after acquiring, RunTx with Fence for every write, tokens verified
//     with sqlguard.WithVerifier), with a log table written in the same
//     transaction that records what was applied.
//
// Every resource runs twice at once on the same workers and faults:
// guarded, and unguarded (the same writes without the fence) as the
// negative control. Each of these lines is sharded: the guarded lines
// share 128 independent locks (48 under the race detector), each
// protecting its own register or row — 64 per workload by default, 32
// when the PostgreSQL and MySQL workloads run too — and a control has 8
// (6). Workers are two goroutines of the
// test process and two worker processes (the test binary executed again;
// TestMain dispatches them), each with its own etcd client behind its own
// fault proxies and its own lease.Client, and each running a loop for
// every shard of every line. A worker does not look at its lease between
// its read and its write — the gap a lease alone cannot close — but
// starts no new cycle once the lease has ended. One acquisition in four
// reenters the lease once and releases it twice. A Release or Reenter
// whose outcome is unknown (lease.ErrOutcomeUnknown, typically under the
// lost-replies fault) is retried, up to four times, and before a retry
// the worker often calls Renew or looks at the lease: the retry must
// still apply at most once. Acquire errors are retried when they match
// lease.ErrRetryable; an error outside lease's documented results fails
// the test.
//
// Each cycle adds one unique element. The run goes through two phases, on
// a one-member and on a three-member embedded etcd (10 ms ticks, 1 s
// leases), while four nemeses inject the faults of package faults
// concurrently:
//
//   - pauses: worker processes stopped with SIGSTOP past their TTL;
//   - links: a worker's links to etcd partitioned, dropping replies or
//     slowed; partitioned while its record is deleted and etcd's history
//     compacted past its watch (compacted-watch); and, on three members,
//     cut from all members but one so that it reconnects elsewhere
//     (member-switch);
//   - leases: holders' leases revoked and records deleted behind their
//     backs, and late writes (slow-writer);
//   - cluster: members restarted from their data dirs while holders renew
//     (member-restart; on one member, the whole cluster), and on three
//     members follower crashes and leader kills.
//
// Faults target the worker that holds the most locks at the time. A slow
// disk is not among them: etcd's embed package has no hook for storage
// latency.
//
// Two independent checkers read every shard. Package check's Check reads
// what the resource applied, in order, and counts as violations the
// applied writes whose token is lower than one applied before (rule i),
// or that come back to a token after another token wrote (rule iii:
// writes under one token are contiguous); and as lost the acknowledged
// elements missing from the final read (rule ii, Jepsen's set-full).
// check.CheckLinearizable (porcupine) reads what the clients saw — every
// claim, read and write with its call and return times and its outcome,
// unknown outcomes left open — and checks that some order of them is a
// legal run of a fenced register (check.FencedRegister). The test prints
// one line per workload and mode, summed over the phases and shards:
//
//	SAFETY workload=register mode=guarded locks=64 ops=7059 ops/s=217 accepted=6304 rejected=79 faults=compacted-watch:2,delay:2,delete-key:8,leader-kill:1,lost-replies:2,member-crash:1,member-restart:3,member-switch:1,partition:3,pause:8,revoke:4,slow-writer:6 violations=0 lost=0 porcupine=linearizable
//
// and totals, the second counting the Release and Reenter calls whose
// outcome was unknown, the other calls made on their leases before the
// retry, the retries that settled, and the last Releases that returned nil
// on a lease that ended as lost all the same, by cause (reported, not
// failed: lease may end a lease at its local deadline while the Release
// that deletes its record is on its way), with "/ended-first" when the
// lease had ended before that Release was called. A nil last Release on a
// lease whose record someone else deleted or overwrote fails the run:
//
//	SAFETY total guarded ops=11704 ops/s=392 fault-kinds=12 run=34s
//	SAFETY lease release-reenter unknown-outcomes=836 calls-between=548 retries-settled=226 released-but-lost=deadline:245,session-expired:1
//
// ops counts read-modify-write cycles started, ops/s per second of the
// phases' run time, accepted those whose write was acknowledged, rejected
// those the fence refused (at the claim, the read or the write); the rest
// failed or were left in doubt (time-outs, late writes). faults counts
// injections that took effect while the line ran: a pause or a link fault
// of a worker, or a member fault, counts for every line, since every
// worker runs every line; a revocation counts for the lines whose holders
// had the revoked lease, a deletion for the line whose record went.
// porcupine is the verdict over the line's shards: linearizable,
// not-linearizable, or unknown when the search timed out. For a guarded
// history that is not linearizable, porcupine's visualisation is written
// to $FENCEKIT_SAFETY_OUT (default: the system's temporary directory) and
// named in the log.
//
// A third check reads the leases: every hand-over of a shard's lock, in
// token order, must find the previous holder told that its hold was over
// — it had begun to release, or its lease's Done had closed — before the
// next holder's Acquire returned (both times taken by the workers, on the
// machine's clock, by goroutines that a loaded machine may schedule late:
// a signal noted up to 50 ms after the next admission passes). A
// hand-over is excused when, between the two
// acquisitions, a fault took leases away behind their holders' backs
// (revoke, delete-key, compacted-watch: the holder hears of it after the
// fact, as lease documents), or froze the previous holder's worker
// process. The line's handovers= field counts the hand-overs checked and
// not excused, early= those that failed the check; they follow
// porcupine= on each line.
//
// The test fails unless every guarded line shows violations=0 lost=0 and
// porcupine=linearizable after at least eight kinds of fault, every line
// shows early=0, every unguarded line shows violations (an unguarded run
// that finds none means the faults did not bite), and every fault kind of
// the rotation took effect at least once.
//
// # Process members
//
// TestSafetyProcesses runs the same workloads, workers, nemeses and
// checks in one shorter phase, on three etcd members that run as server
// processes (etcdtest.WithBinary) of the version FENCEKIT_ETCD_VERSION
// names (3.5, 3.6 or 3.7, the default, built from tools/etcdserver before
// the test, by scripts/test.sh or the command below; or FENCEKIT_ETCD_BIN's
// binary; the test fails at once, naming the command, when it is not built). Its cluster nemesis freezes the leader,
// then kills it, then freezes a follower, then kills one, in turn
// (faults.SigstopLeader, SigkillLeader, SigstopMember, SigkillMember):
// a frozen member is continued after 2.6 s, past the lease TTL; a killed
// one is restarted from its data dir after 1.5 s. It runs at least 20 s,
// then until the guarded lines have started 5,000 cycles, but no longer
// than 30 s, and fails unless each of the four kinds, pause, revoke,
// delete-key and slow-writer took effect:
//
//	go run ./internal/etcdproc/cmd/buildetcd 3.5   # in the repository root, once
//	FENCEKIT_ETCD_VERSION=3.5 go test ./integration -run TestSafetyProcesses -count=1 -v
//
// A line of such a run on etcd 3.6.17:
//
//	SAFETY workload=register mode=guarded locks=64 ops=3459 ops/s=120 accepted=3052 rejected=56 faults=compacted-watch:2,delay:1,delete-key:12,leader-sigkill:2,leader-sigstop:2,lost-replies:2,member-sigkill:1,member-sigstop:2,member-switch:1,partition:2,pause:6,revoke:5,slow-writer:5 violations=0 lost=0 porcupine=linearizable handovers=1841 early=0
//
// # Crash takeover and etcd's lease quirks
//
// A lock-holder worker process (this test binary executed again) takes
// locks on etcd server processes and is killed with SIGKILL or frozen with
// SIGSTOP. TestCrashTakeover checks that a killed holder's successor
// starts within its TTL plus 2 s, and that a frozen holder's writes sent
// with its old token after its successor wrote are all refused by guard's
// middleware. TestLeaderKillWhileLeasePending kills the etcd leader (3
// members) while a dead holder's session is pending: etcd renews it to a
// full TTL (etcd#9395), and the successor must start within the election,
// the TTL and a stated margin, never while the dead holder's record or
// lease remains. TestMassExpiry kills a process holding a lock on each of
// FENCEKIT_MASS_EXPIRY_N sessions (1,000 by default) and checks that
// every successor starts. BenchmarkCrashTakeover and BenchmarkRevokeStorm
// measure takeover times and what a Client holding 1k-100k locks costs
// the others when it dies (scripts/bench.sh runs them).
//
// # Duration
//
// Without FENCEKIT_SOAK, each phase runs at least its share of 26 s and
// then until the guarded lines have started their share of 10,000
// cycles, but no longer than its share of 45 s (40 s under the race
// detector, which slows the workers several times over: expect fewer
// cycles there). Set FENCEKIT_SOAK to a Go duration to run for exactly
// that long instead, for example
//
//	FENCEKIT_SOAK=10m go test ./integration -run '^TestSafety$' -count=1 -v -timeout 30m
//
// The time is split between the two phases, 40% and 60%. The test's own
// deadline (-timeout, 10 minutes by default) must leave room for it.
package integration
