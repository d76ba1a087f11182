// Package fencelock lets client-go's leader election elect through
// fencekit: Lock is a resourcelock.Interface (k8s.io/client-go/tools/
// leaderelection/resourcelock) backed by a lease.Election in etcd, and
// Config wraps a LeaderElectionConfig so that the leader gets the term's
// fencing token and stops before a successor can start.
//
//	lock, err := fencelock.New(etcdClient, "my-controller", podName, fencelock.WithTTL(15*time.Second))
//	...
//	defer lock.Close()
//	le, err := lock.NewLeaderElector(leaderelection.LeaderElectionConfig{
//		Callbacks: leaderelection.LeaderCallbacks{
//			OnStartedLeading: func(ctx context.Context) {
//				// ctx carries the term's token (fence.FromContext), so
//				// sqlguard, guard.Transport and grpcguard fence these
//				// writes; it is cancelled as soon as the term ends.
//				run(ctx)
//			},
//			OnStoppedLeading: func() { log.Print("stopped leading") },
//		},
//	}) // zero durations: lock.Durations(), 15 s / 10 s / 2 s for a 15 s TTL
//	...
//	le.Run(ctx)
//
// (the package's Example runs this against an embedded etcd). For
// controller-runtime's manager, see package ctrlfence.
//
// # Who leads
//
// etcd decides, not an observer's clock. Update by the Lock's identity
// campaigns: the candidate queues in etcd (FIFO) and Update returns once
// it leads; while leading, Update confirms the term (lease.Term.Renew).
// Get reports the leader etcd has, with LeaseDurationSeconds -1, so that
// client-go never waits out a lease by its own clock: every candidate goes
// on to Update and waits in etcd's queue, and the next one leads the
// moment the term ends there (a resign, or the session's expiry). The
// term's creation revision is its fencing token, so terms strictly
// increase.
//
// # No overlap, and the timing rule
//
// A leader stops, and its successor starts, in this order:
//
//  1. the ctx handed to OnStartedLeading is cancelled, with the reason
//     (context.Cause), and the contexts of Lock.Context with it;
//  2. OnStoppedLeading runs (Config);
//  3. only then is the term resigned in etcd, or, if it was lost (its
//     renewals went unconfirmed), etcd can expire it: steps 1 and 2
//     happen when fencekit's validity deadline passes, a safety margin
//     before the earliest moment etcd can expire the session;
//  4. the successor's Update returns and client-go calls its
//     OnStartedLeading.
//
// The Lock does steps 1 and 2 itself, the moment the term ends, whatever
// client-go thinks: client-go would only notice after RenewDeadline of
// failed renewals. Update fails at once (ErrTermEnded) after that, and
// client-go then ends its Run. The timing rule keeps client-go's own view
// (IsLeader, its healthz adaptor, controller-runtime's OnStoppedLeading)
// ending before etcd can admit a successor too:
//
//	RenewDeadline + RetryPeriod <= TTL - 2*margin
//	RenewDeadline < LeaseDuration <= TTL,  RenewDeadline > 1.2*RetryPeriod
//
// Config and SetDurations refuse durations that break it with a
// *DurationError naming the durations to change, and Update refuses a
// confirmation that left the term less than RenewDeadline + RetryPeriod
// of validity (ErrShortValidity), so the rule holds at every renewal, not
// only on paper. Durations returns durations that keep it: for a 15 s TTL
// (margin 1.5 s), client-go's and controller-runtime's defaults 15 s /
// 10 s / 2 s.
//
// What the order cannot give: a process that is stopped (SIGSTOP, a VM
// freeze, a long GC pause) runs neither step 1 nor 2 until it wakes, and
// by then a successor may lead. Its late writes are what fencing is for:
// send the token with every write (sqlguard, guard, grpcguard) and the
// resource refuses them once the successor has written. Work that ignores
// its ctx is not stopped either.
//
// # Loss, release and Run
//
// A Run that ends always resigns the term (Config sets ReleaseOnCancel;
// without it the Lock's session would keep the term alive). A term lost
// in etcd (session expired, record deleted) ends the leadership as above.
// Used through Config, a Lock campaigns again in the elector's next Run;
// used without it (controller-runtime), it leads once.
//
// RunTerms runs the elector Run after Run for a process that stays up after
// a lost term: each term's runnables (Terms.New) get the term's ctx; when
// the term ends, their ctx is cancelled and RunTerms waits until every one
// returned (at most Terms.StopTimeout, else a *StragglerError naming them)
// before it campaigns again, with a strictly higher token. A Run whose term
// ended is cancelled at once, so the next campaign does not wait for
// client-go's RenewDeadline.
//
// # Adopting fencekit in a running controller
//
// Composite holds client-go's coordination.k8s.io Lease (through an
// unmodified resourcelock.LeaseLock) and a Lock's term, and leads only
// while it holds both, with the term's token. A controller that elects
// with a LeaseLock moves to fencekit in three rolling updates: old ->
// composite (wait until no old Pod exists, Terminating ones included) ->
// fencekit only; rollback is the reverse. In the first mixed phase every
// leader holds the Lease (the Composite writes it only through LeaseLock,
// after confirming its term, and stops before releasing either lock), so
// exclusion is client-go's LeaseLock's own; in the second, every leader
// holds a term of the same election, so it is etcd's. Old and
// fencekit-only replicas share no lock and must never run together. The
// k8s README's "Adopting fencekit in a running controller" has the steps
// and the argument in full.
//
// Health: Check (a healthz.Checker) fails when the term's validity, as
// last confirmed, is about to end (WithHealthWindow), before the term's
// Done closes, and after the term ended while the elector still runs.
//
// # What is not promised
//
// Kubernetes objects are not fenced: a leader's writes through the API
// server carry no token and the API server checks none. Use optimistic
// concurrency (resourceVersion), idempotent reconciles, or carry the token
// in the object and check it in an admission webhook. The etcd that
// elects is fencekit's, not the Kubernetes API server's (give the Lock an
// etcd client with TLS and a role limited to its prefix, see the README).
package fencelock
