package etcdtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/internal/etcdproc"
)

// ErrEmbedded reports a call that needs a member process (Config.Binary)
// on an in-process member.
var ErrEmbedded = errors.New("etcdtest: member is in-process, not a process")

// startProcesses starts cfg's cluster as etcd processes of cfg.Binary.
func startProcesses(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.UnixSockets {
		return nil, &ConfigError{Field: "UnixSockets", Reason: "not supported with Binary"}
	}
	pc, err := etcdproc.StartCluster(ctx, etcdproc.Config{
		Dir:             cfg.Dir,
		Members:         cfg.Members,
		TickInterval:    cfg.TickInterval,
		ElectionTimeout: cfg.ElectionTimeout,
		NoFsync:         cfg.NoFsync,
		TLS:             cfg.TLS,
		RootPassword:    cfg.RootPassword,
		Binary:          cfg.Binary,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	c := &Cluster{cfg: cfg, proc: pc, opened: true}
	for _, pm := range pc.Members() {
		c.members = append(c.members, &Member{
			name: pm.Name(), clientURL: pm.ClientURL(), peerURL: pm.PeerURL(), cluster: c, proc: pm,
		})
	}
	return c, nil
}

// Kill stops the member abruptly: a process member gets SIGKILL (a
// crash: no leadership hand-over, nothing flushed beyond what etcd
// wrote); an in-process member is stopped as Stop does. Its data stays
// for Restart.
func (m *Member) Kill() {
	if m.proc != nil {
		m.proc.Kill()
		return
	}
	m.Stop()
}

// Pause freezes a process member with SIGSTOP: its sockets stay open and
// the kernel still accepts connections, but it answers nothing, as a
// frozen machine would. Resume continues it. It returns ErrEmbedded for an
// in-process member.
func (m *Member) Pause() error {
	if m.proc == nil {
		return ErrEmbedded
	}
	return m.proc.Pause()
}

// Resume continues a paused process member (SIGCONT). It returns
// ErrEmbedded for an in-process member.
func (m *Member) Resume() error {
	if m.proc == nil {
		return ErrEmbedded
	}
	return m.proc.Resume()
}

// PID returns the process id of a process member (0 while it is stopped,
// and for an in-process member).
func (m *Member) PID() int {
	if m.proc == nil {
		return 0
	}
	return m.proc.PID()
}
