package kubetest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// StartTimeout bounds how long Start waits for a Server to be ready; a
// warm start takes about 3 s on 2 cores.
const StartTimeout = 60 * time.Second

// Start starts a Server for the test tb, with cfg.Dir defaulting to
// tb.TempDir(), and closes it in tb.Cleanup. When the binaries have not
// been built it skips tb with a message naming BuildCommand, or fails it
// when EnvRequire is "1"; it never builds them within the test's time.
// Any other failure ends the test with tb.Fatal; call Start from the
// test's goroutine.
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	if err := cfg.resolve(); err != nil {
		if errors.Is(err, ErrNotBuilt) && os.Getenv(EnvRequire) != "1" {
			tb.Skipf("%v; %s=1 makes this test fail instead", err, EnvRequire)
		}
		tb.Fatal(err)
	}
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	s, err := StartServer(ctx, cfg)
	if err != nil {
		tb.Fatalf("kubetest: start: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("kubetest: close: %v", err)
		}
	})
	return s
}
