// Package ctrlfence makes a controller-runtime manager elect its leader
// through fencekit (package fencelock) and hands the leader's fencing token
// to its reconcilers and other leader-election runnables.
//
//	lock, err := fencelock.New(etcdClient, "my-controller", podName, fencelock.WithTTL(15*time.Second))
//	...
//	defer lock.Close()
//	opts, err := ctrlfence.Options(lock, manager.Options{Scheme: scheme})
//	...
//	mgr, err := manager.New(restConfig, opts)
//	...
//	err = mgr.AddHealthzCheck("fencekit", ctrlfence.HealthCheck(lock))
//
// A reconciler then finds the term's token with fence.FromContext(ctx) and
// writes through sqlguard, guard.Transport or grpcguard with that ctx; the
// ctx is cancelled as soon as the term ends, before etcd can admit the
// next leader (see package fencelock for the timing rule).
//
// NewClient (or NewManagerClient as manager.Options.NewClient) fences the
// objects the manager writes through the Kubernetes API server: each write
// carries ctx's token in package kubefence's annotation, and kubefence's
// admission policy makes the API server refuse a deposed leader's writes
// (see kubefence for what is and is not fenced). Without that policy the
// API server checks no token: a deposed leader's in-flight API writes can
// land after its successor's.
//
// The manager leads at most once: as with any controller-runtime leader
// election, a lost term stops the manager (Start returns "leader election
// lost"); run a new manager (usually: let the process restart) with a new
// Lock to campaign again. Or stay up: TermRunner, added to a manager that
// does not elect, campaigns through the Lock and runs each term's
// controllers (made anew per term on the manager's cache), stops them when
// the term ends, waits until they returned, and campaigns again.
package ctrlfence
