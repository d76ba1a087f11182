// Package shard splits a group's work into shards (tenants, partitions,
// key ranges) among the members of a fleet, so that every shard is owned
// by at most one member at a time, shares are balanced by weight, shards
// move between members by hand-off, and each ownership carries a fencing
// token that the resources it writes can check (packages guard and
// sqlguard).
//
//	group, err := shard.NewGroup(locks, cli, "jobs", shard.Count(4))
//	...
//	m, err := group.Join(ctx, "worker-1", 1)
//	...
//	for ev := range m.Events() {
//		if ev.Kind == shard.Gained {
//			tok, _ := fence.FromContext(ev.Context) // what guard.Transport sends
//			owned = append(owned, fmt.Sprintf("%s@%s", ev.Shard, tok.Lock))
//			// go work(ev.Context, ev.Shard): stop when ev.Context ends.
//		}
//	...
//	if err := m.Leave(ctx); err != nil { // alone: gives the shards up
//
// (the package's Example; Example_sqlguard fences each tenant's rows).
//
// It is built on package lease's public API only: a shard is the lock
// "group:shard" of a lease.Client, so its fencing token is a lease token
// (fence.Token), and its owner is whoever holds that lock. Nothing else
// decides ownership: the assignment below only decides who tries to take
// which lock, so a stale or disputed assignment costs balance or time,
// never exclusivity.
//
// # How it works
//
// A member registers itself under <prefix><group>/members/<name> (a key
// attached to an etcd lease of its own, WithTTL, renewed in the
// background) with its weight, and campaigns in the lease election
// "group:". The leader watches the registrations, waits until they have
// not changed for WithSettle (100 ms; 1 s at most after the first change)
// and writes the assignment, one etcd value listing each shard's owner,
// in a transaction conditioned on its term (lease.Verifier.Condition): a
// deposed leader's write fails. Every member watches the assignment.
//
// The assignment is sticky: a new plan is computed from the stored one
// and the members, as a pure function of the two. Each member that is not
// draining gets a quota, its weighted fair share n·w/W rounded down or
// up (largest remainders first, then those holding more now), so every
// share is within one shard of the weighted fair share. A shard stays
// with its owner while the owner is registered, not draining and within
// quota; the others (a departed or draining owner's, those shed by a
// member above quota, unowned ones) go to members below quota, each to
// the one that ranks it highest by rendezvous hashing. So:
//
//   - A join, with equal weights and a settled group of m members, moves
//     exactly floor(n/(m+1)) shards, all to the newcomer (at most
//     ceil(n/members) + 1, the bound the tests check); with weights, the
//     newcomer's quota plus at most one shard per member whose rounded
//     share went up.
//   - A death, a Close or a drain moves exactly the departed member's
//     shards (equal weights; TestPlanMovesExactly checks both bounds).
//   - Concurrent joins within one settle time are one plan: every shard
//     moves at most once, to its final owner. Joins further apart are
//     successive plans, each moving only what it must; a plan never
//     depends on the order in which members were seen.
//
// A member whose assignment gains a shard queues for the shard's lock
// (lease.Client.Acquire with its name as metadata) and, once its record
// waits in the queue, asks the holder to let go (admin.Admin.RequestRelease).
// The holder lets go when its own assignment also moves the shard away
// and it has been asked (or nobody is assigned the shard, or WithHandoff
// passed without a successor asking): it cancels the shard's context
// (cause ErrMoved), then releases the lock, whose delete admits the
// successor from the one watch event: no overlap, and a gap of about one
// etcd round trip (see Measured). A member that dies or is cut off loses
// its shards when its lease.Client's session ends (the contexts end first,
// with the lease's loss: lease's Prompt loss guarantee), and its
// registration expires about then; the leader then assigns its shards to
// the others, which are admitted as soon as the dead session's records
// are gone: within the TTL plus the settle time and a few round trips of
// the death.
//
// # Events
//
// Member.Events delivers, per shard and in order, Gained (the member owns
// it; the event's Context carries its fence.Token and its lease) and Lost
// (why: ErrMoved, ErrLeft, or the lease's *lease.LostError). The Context
// of a Gained event is cancelled, with that reason as its cause, before
// the member releases the shard's lock and before etcd could expire it,
// so before anyone else can own the shard. Guards fence with it
// unchanged: guard.Transport and the gRPC interceptors read the token
// from the context; sqlguard takes Event.Fence. A member that paused past
// the end (a GC, a stalled disk) and writes late is refused by the guard
// once the successor has written.
//
// # What it costs etcd
//
// In steady state, per member: the keep-alives of its lease.Client
// session and of its registration (one each per third of their TTLs),
// and watches that send nothing (the assignment key, the registrations
// for the leader, the lease.Client's records on its one watch stream);
// nothing per shard, whatever the number of shards: measured 0.7
// requests/s per member with the default TTL of 10 s at both 256 and
// 4,096 shards. Per move: the successor's Acquire (a transaction or two),
// an ask (an Inspect and a RequestRelease), the holder's Release (one
// transaction) and the successor's admission read. A member starts at
// most 64 acquisitions per 20 ms and makes at most 16 asks at once, so
// that one that gains thousands of shards does not starve its own
// session's renewals. Per membership change: one transaction by the
// leader, and one watch event to every member (the assignment, about 2
// bytes per shard plus the member names; 1.5 MiB, etcd's default request
// limit, is far above MaxShards).
//
// # Measured
//
// BenchmarkShard in package integration measures a planned move's gap per
// shard, a drain, the steady state's etcd requests and simultaneous joins;
// the figures are in
// https://github.com/fencekit/fencekit/blob/main/docs/sharding.md#measured.
//
// # Metrics
//
// With WithMetrics: fencekit_shard_owned{group,member} (shards owned now),
// fencekit_shard_moves_total{group,cause} (shards the leader's plans gave
// a new owner: initial, rebalance, departed, drain; counted by the
// leader's process), fencekit_shard_gain_wait_seconds{cause} (from the
// assignment giving a member a shard to owning it: handoff when a holder
// was asked, free otherwise; the time a shard is unowned is at most this,
// and for a hand-off far less: the benchmark measures it).
//
// # What it does not do
//
// It balances shard counts by weight, not load: there is no load
// measurement. It does not copy a shard's state: the successor starts
// from what the shard's resources hold, which the fence keeps consistent.
// Shards are fixed per group: every member must give the same Shards
// (an assignment for other shards is refused with ErrMismatch and
// replaced by the next leader). A member whose etcd connection hangs
// without failing notices through its lease.Client's validity deadline;
// configure gRPC keep-alives on the etcd client (see lease's Leader
// failure) so that watches recover.
//
// # Concurrency
//
// Group and Member are safe for concurrent use. Each Member runs a few
// goroutines (registration, assignment, election) and one per shard it
// owns or waits for; Close waits for all of them.
package shard
