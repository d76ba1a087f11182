package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// TailBytes is how much of the end of a log LogTail returns at most.
const TailBytes = 3000

// Process is a started child process. Its methods are safe for concurrent
// use.
type Process struct {
	name    string
	logFile string
	cmd     *exec.Cmd
	done    chan struct{} // closed once it exited; err is set before
	err     error         // Wait's
}

// Spec describes a process to start.
type Spec struct {
	// Name names the process in errors, such as "etcd m0".
	Name string
	// Binary and Args are the program and its arguments.
	Binary string
	Args   []string
	// Env is the environment; nil means this process's.
	Env []string
	// LogFile receives the process's output (appended).
	LogFile string
}

// Start starts the process s describes and returns once it has started
// (not once it serves).
func Start(s Spec) (*Process, error) {
	log, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	p := &Process{name: s.Name, logFile: s.LogFile, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The thread that starts the process lives as long as it: on
		// Linux the kernel kills the process when that thread exits.
		lockThread()
		defer log.Close()
		cmd := exec.Command(s.Binary, s.Args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.Env = s.Env
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.cmd = cmd
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	return p, nil
}

// PID returns the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits for the process to exit, killing it
// (SIGKILL) after timeout. Stopping an exited process does nothing.
func (p *Process) Stop(timeout time.Duration) {
	_ = p.cmd.Process.Signal(sigTerm)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
	}
}

// Kill kills the process (SIGKILL) and waits until it is gone.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Pause stops the process with SIGSTOP (pause true) or continues it with
// SIGCONT.
func (p *Process) Pause(pause bool) error {
	sig := sigCont
	if pause {
		sig = sigStop
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	return nil
}

// ExitError describes an exit while starting, quoting the end of the log
// (without the lines skip drops; skip may be nil). It matches
// syscall.EADDRINUSE when the log says a port was taken. Call it once Done
// is closed.
func (p *Process) ExitError(skip func(line string) bool) error {
	tail := LogTail(p.logFile, skip)
	err := fmt.Errorf("%s exited while starting: %v: %s", p.name, p.err, tail)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%w: %w", err, syscall.EADDRINUSE)
	}
	return err
}

// NotReady describes a start that ctx ended first (cause is ctx's error),
// quoting the end of the log as ExitError does.
func (p *Process) NotReady(cause error, skip func(line string) bool) error {
	return fmt.Errorf("%s not ready: %w (log: %s)", p.name, cause, LogTail(p.logFile, skip))
}

// LogTail returns the last TailBytes of the file, without the lines skip
// drops (skip may be nil), or the error that reading it gave.
func LogTail(file string, skip func(line string) bool) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	tail := string(b)
	if skip != nil {
		var keep []string
		for _, line := range strings.Split(tail, "\n") {
			if !skip(line) {
				keep = append(keep, line)
			}
		}
		tail = strings.Join(keep, "\n")
	}
	if len(tail) > TailBytes {
		tail = tail[len(tail)-TailBytes:]
	}
	return tail
}

// ErrNoRSS reports a /proc status without VmRSS.
var ErrNoRSS = errors.New("proc: no VmRSS")
