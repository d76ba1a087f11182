// Package integration holds fencekit's tests against real embedded etcd
// clusters, and its Jepsen-style safety suite; it exports nothing. The
// reusable faults live in package faults.
//
// # The safety suite
//
// TestSafety runs workers that repeatedly acquire a lease and do
// read-modify-write cycles, with random think time, on shared resources:
//
//   - register: an in-memory set behind guard's HTTP middleware, served by
//     an httptest.Server (every method fenced, so the first read of a new
//     holder raises the mark, as guard.Claim would);
//   - sql-sqlite, and sql-postgres and sql-mysql when FENCEKIT_PG_DSN and
//     FENCEKIT_MYSQL_DSN are set: a row holding a set, written through
//     sqlguard (Claim after acquiring, RunTx with Fence for every write).
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
// The checker reads what each resource applied, in order, and counts as
// violations the applied writes whose token is lower than one applied
// before, or that come back to a token after another token wrote; and as
// lost the acknowledged elements missing from the final read (Jepsen's
// set-full). It prints one line per workload and mode:
//
//	SAFETY workload=register mode=guarded ops=210 accepted=180 rejected=12 faults=delay:2,... violations=0 lost=0
//
// and fails unless every guarded line has violations=0 lost=0 after at
// least five kinds of fault, and every unguarded line shows violations: an
// unguarded run that finds none means the faults did not bite.
//
// # Duration
//
// The run is time-boxed, not op-counted, so the race detector slows the
// ops but not the test: about 30 s by default. Set FENCEKIT_SOAK to a Go
// duration to run longer, for example
//
//	FENCEKIT_SOAK=10m go test ./integration -run TestSafety -count=1 -v -timeout 30m
//
// The time is split between the two phases. -short halves the default.
package integration
