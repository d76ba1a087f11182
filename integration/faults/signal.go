package faults

import (
	"context"
	"fmt"
	"sync"
)

// The kinds of the process-level member faults, as Fault.Kind returns
// them.
const (
	// KindMemberSigstop: an etcd member process frozen with SIGSTOP,
	// continued with SIGCONT on heal.
	KindMemberSigstop = "member-sigstop"
	// KindLeaderSigstop: the etcd leader's process frozen with SIGSTOP,
	// continued with SIGCONT on heal.
	KindLeaderSigstop = "leader-sigstop"
	// KindMemberSigkill: an etcd member process killed with SIGKILL,
	// restarted from its data dir on heal.
	KindMemberSigkill = "member-sigkill"
	// KindLeaderSigkill: the etcd leader's process killed with SIGKILL,
	// restarted from its data dir on heal.
	KindLeaderSigkill = "leader-sigkill"
)

// ProcessMember is an etcd member that runs as a process of its own, such
// as a member of an etcdtest cluster started with etcdtest.WithBinary: a
// test can signal it as an operator or a failing machine would.
type ProcessMember interface {
	Member
	// Kill kills the member's process with SIGKILL (a crash: no
	// leadership hand-over) and returns once it is gone. Its data stays
	// for Restart.
	Kill()
	// Pause freezes the member's process with SIGSTOP: its sockets stay
	// open, and it answers nothing.
	Pause() error
	// Resume continues a paused member with SIGCONT.
	Resume() error
}

// SigstopMember freezes member m's process with SIGSTOP and continues it
// with SIGCONT on Heal, as a frozen VM would stall it. Clients connected
// to it see requests hang, not fail; a follower's peers carry on, and a
// frozen leader is replaced after an election timeout (it steps down once
// it runs again).
func SigstopMember(m ProcessMember) Fault {
	return &signalFault{kind: KindMemberSigstop, pick: func() ProcessMember { return m }, stop: true}
}

// SigstopLeader freezes whichever of members is the raft leader when
// injected, as SigstopMember does, and continues it on Heal. Inject
// returns ErrNoTarget when no member leads.
func SigstopLeader(members ...ProcessMember) Fault {
	return &signalFault{kind: KindLeaderSigstop, pick: leaderOf(members), stop: true}
}

// SigkillMember kills member m's process with SIGKILL and restarts it from
// its data dir, on the same addresses, on Heal (Heal returns once it is
// ready; its ctx bounds the wait).
func SigkillMember(m ProcessMember) Fault {
	return &signalFault{kind: KindMemberSigkill, pick: func() ProcessMember { return m }}
}

// SigkillLeader kills whichever of members is the raft leader when
// injected, as SigkillMember does, and restarts it on Heal. Inject returns
// ErrNoTarget when no member leads.
func SigkillLeader(members ...ProcessMember) Fault {
	return &signalFault{kind: KindLeaderSigkill, pick: leaderOf(members)}
}

// leaderOf returns a function that finds the leader among members, or nil.
func leaderOf(members []ProcessMember) func() ProcessMember {
	return func() ProcessMember {
		for _, m := range members {
			if m.IsLeader() {
				return m
			}
		}
		return nil
	}
}

// signalFault freezes (stop) or kills its target on Inject and undoes it
// on Heal.
type signalFault struct {
	kind string
	pick func() ProcessMember
	stop bool // SIGSTOP / SIGCONT; otherwise SIGKILL / restart

	mu  sync.Mutex
	hit ProcessMember
}

func (f *signalFault) Kind() string { return f.kind }

func (f *signalFault) Inject(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hit != nil {
		return fmt.Errorf("faults: %s already injected", f.kind)
	}
	m := f.pick()
	if m == nil {
		return ErrNoTarget
	}
	if f.stop {
		if err := m.Pause(); err != nil {
			return fmt.Errorf("faults: %s: %w", f.kind, err)
		}
	} else {
		m.Kill()
	}
	f.hit = m
	return nil
}

func (f *signalFault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hit == nil {
		return nil
	}
	var err error
	if f.stop {
		err = f.hit.Resume()
	} else {
		err = f.hit.Restart(ctx)
	}
	if err != nil {
		return fmt.Errorf("faults: %s: heal: %w", f.kind, err)
	}
	f.hit = nil
	return nil
}
