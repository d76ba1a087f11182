package etcdtest

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// embedRunner runs members inside the test process.
type embedRunner struct {
	logger *zap.Logger // nil: none
}

// embedServer is a member's etcd inside the test process.
type embedServer struct {
	name string
	e    *embed.Etcd

	closeOnce sync.Once
	closed    chan struct{} // closed once e is
}

// Launch starts s's etcd without waiting for it to be ready.
func (r embedRunner) Launch(s etcdproc.Spec) (etcdproc.Server, error) {
	cfg, err := r.config(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	return &embedServer{name: s.Name, e: e, closed: make(chan struct{})}, nil
}

// config is the etcd configuration of s.
func (r embedRunner) config(s etcdproc.Spec) (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = s.Name
	cfg.Dir = s.DataDir
	cfg.TickMs = uint(s.TickInterval.Milliseconds())
	cfg.ElectionMs = uint(s.ElectionTimeout.Milliseconds())
	cfg.UnsafeNoFsync = s.NoFsync
	lg := r.logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.With(zap.String("member", s.Name)))
	// No metrics URL: etcd's metrics are registered process-wide, so
	// in-process members would all report the same values.
	var us [2]*url.URL
	for i, raw := range []string{s.ClientURL, s.PeerURL} {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		us[i] = u
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*us[0]}, []url.URL{*us[0]}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*us[1]}, []url.URL{*us[1]}
	cfg.InitialCluster = s.InitialCluster
	cfg.InitialClusterToken = s.Token
	cfg.ClusterState = s.State
	if cs := s.Certs; cs != nil {
		info := transport.TLSInfo{CertFile: cs.CertFile, KeyFile: cs.KeyFile, TrustedCAFile: cs.CAFile, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	return cfg, nil
}

// Ready waits until the server is ready, or closes it.
func (s *embedServer) Ready(ctx context.Context) error {
	select {
	case <-s.e.Server.ReadyNotify():
		return nil
	case err := <-s.e.Err():
		s.Stop()
		return fmt.Errorf("%s: %w", s.name, err)
	case <-s.e.Server.StopNotify():
		s.Stop()
		return fmt.Errorf("%s stopped while starting", s.name)
	case <-ctx.Done():
		s.Stop()
		return fmt.Errorf("%s not ready: %w", s.name, ctx.Err())
	}
}

// Exited reports whether the server was closed.
func (s *embedServer) Exited() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Stop closes the server. Not HardStop first: the peer server would then
// serve requests on a closed backend, and such a request blocks for ever.
func (s *embedServer) Stop() {
	s.closeOnce.Do(func() {
		s.e.Close()
		close(s.closed)
	})
}

// Kill stops the server as Stop does: there is no process to kill.
func (s *embedServer) Kill() { s.Stop() }

// Pause fails with ErrEmbedded: there is no process to freeze.
func (s *embedServer) Pause(bool) error { return ErrEmbedded }

// PID is 0: there is no process.
func (s *embedServer) PID() int { return 0 }

// Status reports the leader the server sees.
func (s *embedServer) Status(context.Context) (etcdproc.Status, error) {
	srv := s.e.Server
	lead := uint64(srv.Leader())
	return etcdproc.Status{HasLeader: lead != 0, IsLeader: lead != 0 && lead == uint64(srv.MemberID()), LeaderID: lead}, nil
}
