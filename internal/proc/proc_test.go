//go:build unix

package proc_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/proc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, script string) (*proc.Process, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "out.log")
	p, err := proc.Start(proc.Spec{Name: "sh", Binary: "/bin/sh", Args: []string{"-c", script}, LogFile: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p, log
}

// Stop ends a process that exits on SIGTERM, and kills one that ignores it
// after the timeout.
func TestStop(t *testing.T) {
	p, _ := start(t, "sleep 30")
	p.Stop(10 * time.Second)
	if !p.Exited() {
		t.Fatal("not exited after Stop")
	}
	stubborn, log := start(t, "trap '' TERM; echo ready; while :; do sleep 0.01; done")
	for !strings.Contains(proc.LogTail(log, nil), "ready") {
		time.Sleep(5 * time.Millisecond)
	}
	begin := time.Now()
	stubborn.Stop(200 * time.Millisecond)
	if !stubborn.Exited() || time.Since(begin) < 200*time.Millisecond {
		t.Fatalf("Stop of a process ignoring SIGTERM: exited %v after %v", stubborn.Exited(), time.Since(begin))
	}
}

// Pause freezes the process; Resume lets it go on.
func TestPause(t *testing.T) {
	p, log := start(t, "while :; do echo tick; sleep 0.01; done")
	time.Sleep(50 * time.Millisecond)
	if err := p.Pause(true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // a tick under way ends
	frozen := proc.LogTail(log, nil)
	time.Sleep(100 * time.Millisecond)
	if got := proc.LogTail(log, nil); got != frozen {
		t.Error("a paused process kept writing")
	}
	if err := p.Pause(false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := proc.LogTail(log, nil); got == frozen {
		t.Error("a resumed process wrote nothing")
	}
}

// ExitError quotes the log without the skipped lines and matches
// EADDRINUSE when the log says a port was taken.
func TestExitError(t *testing.T) {
	p, _ := start(t, "echo noise; echo 'listen tcp: address already in use'; exit 3")
	<-p.Done()
	err := p.ExitError(func(line string) bool { return strings.Contains(line, "noise") })
	if !errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "noise") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("ExitError = %v", err)
	}
	if _, err := proc.Start(proc.Spec{Name: "none", Binary: "/nonexistent", LogFile: filepath.Join(t.TempDir(), "l")}); err == nil {
		t.Error("Start of a missing binary succeeded")
	}
}

func Example() {
	dir, err := os.MkdirTemp("", "proc-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "server.log")
	p, err := proc.Start(proc.Spec{Name: "server", Binary: "/bin/sh", Args: []string{"-c", "echo serving; exec sleep 30"}, LogFile: log})
	if err != nil {
		panic(err)
	}
	for !strings.Contains(proc.LogTail(log, nil), "serving") {
		time.Sleep(5 * time.Millisecond)
	}
	p.Stop(10 * time.Second) // SIGTERM, SIGKILL after 10 s
	fmt.Println(p.Exited(), strings.TrimSpace(proc.LogTail(log, nil)))
	// Output: true serving
}
