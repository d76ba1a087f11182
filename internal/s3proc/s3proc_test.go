//go:build unix

package s3proc_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/s3proc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBuilt: with an empty cache Built names the build command; the
// variable names a binary instead.
func TestBuilt(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(s3proc.EnvBinary, "")
	_, err := s3proc.Built()
	var nb *s3proc.NotBuiltError
	if !errors.As(err, &nb) || !errors.Is(err, s3proc.ErrNotBuilt) || !strings.Contains(err.Error(), s3proc.BuildCommand) {
		t.Fatalf("Built with an empty cache = %v, want a *NotBuiltError naming %q", err, s3proc.BuildCommand)
	}
	if nb.Release != "1.8.0" {
		t.Errorf("release %q, want 1.8.0 (tools/versitygw/go.mod)", nb.Release)
	}
	t.Setenv(s3proc.EnvBinary, "/opt/versitygw")
	if bin, err := s3proc.Built(); bin != "/opt/versitygw" || err != nil {
		t.Errorf("Built with %s set = %q, %v", s3proc.EnvBinary, bin, err)
	}
}

// TestStartStop starts the built server, which answers, and stops it by
// its PID.
func TestStartStop(t *testing.T) {
	bin, err := s3proc.Built()
	if err != nil {
		if os.Getenv(s3proc.EnvRequire) == "1" {
			t.Fatal(err)
		}
		t.Skipf("versitygw: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := s3proc.Start(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pid := srv.PID()
	t.Logf("versitygw %d answered on %s after %s", pid, srv.Endpoint, srv.Started)
	srv.Stop()
	srv.Stop()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("versitygw %d still runs after Stop", pid)
	}
}
