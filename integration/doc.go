// Package integration holds fencekit's tests against real embedded etcd
// clusters, and its Jepsen-style safety suite; it exports nothing. What
// it is built from is public, for testing your own critical sections: the
// embedded clusters in package etcdtest, the faults in package faults and
// the history checker in package check.
//
// # The safety suite
//
// TestSafety (an embedded etcd of one, then three members) and
// TestSafetyProcesses (three etcd server processes of the version
// FENCEKIT_ETCD_VERSION names) run workers that acquire leases and do
// read-modify-write cycles on shared resources, guarded and unguarded (the
// negative control), while nemeses inject the faults of package faults;
// package check's Check and CheckLinearizable (against
// check.FencedRegister) and a check of every hand-over read the histories,
// and the test prints one SAFETY line per workload and mode. What runs,
// what each field means, when the test fails and what runs measured:
// https://github.com/fencekit/fencekit/blob/main/docs/safety-testing.md.
//
//	go test ./integration -run '^TestSafety$' -count=1 -v
//	go run ./internal/etcdproc/cmd/buildetcd 3.5   # in the repository root, once
//	FENCEKIT_ETCD_VERSION=3.5 go test ./integration -run TestSafetyProcesses -count=1 -v
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
// Without FENCEKIT_SOAK, TestSafety's two phases run at least 26 s in all,
// then until the guarded lines have started 10,000 cycles, but no longer
// than 45 s (40 s under the race detector). FENCEKIT_SOAK, a Go duration,
// runs for exactly that long instead; the test's -timeout must leave room
// for it.
package integration
