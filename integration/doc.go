// Package integration holds fencekit's tests against real embedded etcd
// clusters, and its Jepsen-style safety suite; it exports nothing. What
// it is built from is public, for testing your own critical sections: the
// embedded clusters in package etcdtest, the faults in package faults and
// the history checker in package check.
//
// # The safety suite
//
// TestSafety runs workers that repeatedly acquire a lease and do
// read-modify-write cycles, with random think time, on shared resources:
//
//   - register: an in-memory set behind guard's HTTP middleware, served by
//     an httptest.Server (every method fenced, so the first read of a new
//     holder raises the mark, as guard.Claim would; new tokens verified
//     against etcd with lease.Verifier);
//   - sql-sqlite always, and sql-postgresql and sql-mysql or sql-mariadb
//     (named after the server that answers) when FENCEKIT_PG_DSN and
//     FENCEKIT_MYSQL_DSN are set (FENCEKIT_REQUIRE_DB=1 makes them
//     mandatory): a row holding a set, written through sqlguard (Claim
//     after acquiring, RunTx with Fence for every write, tokens verified
//     with sqlguard.WithVerifier), with a log table written in the same
//     transaction that records what was applied.
//
// Workers are two goroutines of the test process and two worker processes
// (the test binary executed again; TestMain dispatches them), each with
// its own etcd client behind its own fault proxies, and each running every
// line. A worker does not look at its lease between its read and its
// write — the gap a lease alone cannot close — but starts no new cycle
// once the lease has ended.
//
// Each cycle adds one unique element. Every resource runs twice at once on
// the same workers and faults: guarded, and unguarded (the same writes
// without the fence) as the negative control. The run goes through two
// phases, on a one-member and on a three-member embedded etcd (10 ms ticks,
// 1 s leases), while nemeses inject the faults of package faults: worker
// processes paused past their TTL with SIGSTOP, client links to etcd
// partitioned, dropping replies or slowed, holders' leases revoked and
// records deleted, late writes, and in the three-member cluster member
// crashes and leader kills.
//
// The checker (package check) reads what each resource applied, in
// order, and counts as violations the applied writes whose token is lower
// than one applied before (rule i), or that come back to a token after
// another token wrote (rule iii: writes under one token are contiguous);
// and as lost the acknowledged elements missing from the final read (rule
// ii, Jepsen's set-full). It prints one line per workload and mode, summed
// over the phases:
//
//	SAFETY workload=register mode=guarded ops=99 accepted=82 rejected=9 faults=delay:1,delete-key:5,leader-kill:1,lost-replies:2,member-crash:1,partition:2,pause:5,revoke:4,slow-writer:5 violations=0 lost=0
//
// ops counts read-modify-write cycles started, accepted those whose write
// was acknowledged, rejected those the fence refused (at the claim, the
// read or the write); the rest failed or were left in doubt (time-outs,
// late writes). faults counts injections that took effect while the line
// ran: a pause or a partition of a worker counts for every line, since
// every worker runs every line; a revocation counts for the lines whose
// holder had the revoked lease, a deletion for the line whose record went.
//
// The test fails unless every guarded line shows violations=0 lost=0 after
// at least five kinds of fault, and every unguarded line shows violations:
// an unguarded run that finds none means the faults did not bite.
//
// # Duration
//
// The run is time-boxed, not op-counted, so the race detector slows the
// ops but not the test: about 35 s by default (26 s of faults). Set FENCEKIT_SOAK to a Go
// duration to run longer, for example
//
//	FENCEKIT_SOAK=10m go test ./integration -run TestSafety -count=1 -v -timeout 30m
//
// The time is split between the two phases, 40% and 60%. The test's own
// deadline (-timeout, 10 minutes by default) must leave room for it.
package integration
