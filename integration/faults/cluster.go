package faults

import (
	"context"
	"fmt"
	"sync"
)

// Member is one member of an etcd cluster that a test can stop and start
// again on the same data, such as a member of an in-process cluster built
// on go.etcd.io/etcd/server/v3/embed.
type Member interface {
	// Stop stops the member abruptly; its data stays.
	Stop()
	// Restart starts a stopped member again on the same addresses and data
	// and returns once it is ready.
	Restart(ctx context.Context) error
	// IsLeader reports whether the member is running and is the raft
	// leader.
	IsLeader() bool
}

// CrashMember stops member m, and restarts it on Heal. With three members,
// the cluster stays available; clients connected to m must fail over.
func CrashMember(m Member) Fault {
	return &memberFault{kind: KindMemberCrash, pick: func() Member { return m }}
}

// KillLeader stops whichever of members is the raft leader when injected,
// and restarts it on Heal. The others elect a new leader; leases survive
// with a fresh TTL. It returns ErrNoTarget when no member is leader.
func KillLeader(members ...Member) Fault {
	return &memberFault{kind: KindLeaderKill, pick: func() Member {
		for _, m := range members {
			if m.IsLeader() {
				return m
			}
		}
		return nil
	}}
}

type memberFault struct {
	kind string
	pick func() Member

	mu      sync.Mutex
	stopped Member
}

func (f *memberFault) Kind() string { return f.kind }

func (f *memberFault) Inject(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped != nil {
		return fmt.Errorf("faults: %s already injected", f.kind)
	}
	m := f.pick()
	if m == nil {
		return ErrNoTarget
	}
	m.Stop()
	f.stopped = m
	return nil
}

func (f *memberFault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == nil {
		return nil
	}
	if err := f.stopped.Restart(ctx); err != nil {
		return fmt.Errorf("faults: restart member: %w", err)
	}
	f.stopped = nil
	return nil
}

// RestartMember stops member m and starts it again at once from its data
// dir, on the same addresses; Inject returns once it is ready (ctx bounds
// the wait). Holders renewing through m see their requests fail and must
// retry or fail over; with one member the whole cluster goes down for the
// restart, and the leases it granted come back with a fresh TTL. Heal does
// nothing.
func RestartMember(m Member) Fault {
	return &funcFault{kind: KindMemberRestart, inject: func(ctx context.Context) error {
		m.Stop()
		if err := m.Restart(ctx); err != nil {
			return fmt.Errorf("faults: restart member: %w", err)
		}
		return nil
	}}
}
