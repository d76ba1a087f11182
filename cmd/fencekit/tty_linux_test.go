package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openPTY returns a new pseudo-terminal's controlling and terminal ends.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { pts.Close() })
	return ptm, pts
}

// TestRunInteractive: on a terminal, the command gets the terminal's
// foreground (it can read it, and Ctrl-C reaches it), and fencekit takes
// it back afterwards.
func TestRunInteractive(t *testing.T) {
	cl := etcdtest.Start(t)
	ptm, pts := openPTY(t)
	cmd := exec.Command(bin, "run", "tty", "--", "sh", "-c", `trap "echo int; exit 5" INT; read a; echo "got $a"; sleep 10`)
	cmd.Env = append(os.Environ(), endpointsEnv(cl)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var out syncBuffer
	go func() { _, _ = io.Copy(&out, ptm) }() // ends when ptm is closed

	// Type a line, wait for the answer, then Ctrl-C.
	require.Eventually(t, func() bool {
		_, _ = ptm.Write([]byte("hello\n"))
		return bytes.Contains([]byte(out.String()), []byte("got hello"))
	}, 20*time.Second, 500*time.Millisecond, "command did not read the terminal: %q", out.String())
	_, err := ptm.Write([]byte{3})
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("fencekit did not exit after Ctrl-C: %q", out.String())
	}
	assert.Equal(t, 5, cmd.ProcessState.ExitCode(), out.String())
	assert.Contains(t, out.String(), "int")
	requireFree(t, cl.Members[0].ClientURL, "tty")
}

// TestStatusWatchTerminal: on a terminal, "status --watch" clears the
// screen and redraws at a change.
func TestStatusWatchTerminal(t *testing.T) {
	cl := etcdtest.Start(t)
	ptm, pts := openPTY(t)
	cmd := exec.Command(bin, "status", "--watch")
	cmd.Env = append(os.Environ(), endpointsEnv(cl)...)
	cmd.Stdout, cmd.Stderr = pts, pts
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var out syncBuffer
	go func() { _, _ = io.Copy(&out, ptm) }() // ends when ptm is closed
	clear := []byte("\x1b[H\x1b[2J")
	require.Eventually(t, func() bool { return bytes.Count([]byte(out.String()), clear) == 1 }, 20*time.Second, 10*time.Millisecond, "%q", out.String())
	l, err := newLocks(t, cl).Acquire(ctxT(t, 10*time.Second), "tty")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := out.String()
		return bytes.Count([]byte(s), clear) == 2 && bytes.Contains([]byte(s[strings.LastIndex(s, "\x1b[2J"):]), []byte("holder"))
	}, 10*time.Second, 10*time.Millisecond, "%q", out.String())
	require.NoError(t, l.Release(ctxT(t, 5*time.Second)))
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("status --watch still running 10s after SIGINT")
	}
}
