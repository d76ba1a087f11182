//go:build unix

package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// EnvWorker is the environment variable that tells a binary started by
// StartWorker which worker to run.
const EnvWorker = "FENCEKIT_FAULTS_WORKER"

// WorkerFunc is the body of a worker process. ctx ends when the parent
// stops the worker (or dies): the worker should finish what it is doing
// and return. A non-nil error makes the process exit with status 1 after
// printing it to stderr.
type WorkerFunc func(ctx context.Context) error

// ServeWorker turns this process into a worker when it was started by
// StartWorker: it runs the WorkerFunc that workers maps the name in
// EnvWorker to, and exits. Otherwise it returns at once. Call it first
// thing in TestMain (or main), before flags are parsed:
//
//	func TestMain(m *testing.M) {
//		faults.ServeWorker(map[string]faults.WorkerFunc{"writer": runWriter})
//		goleak.VerifyTestMain(m)
//	}
func ServeWorker(workers map[string]WorkerFunc) {
	name, ok := os.LookupEnv(EnvWorker)
	if !ok {
		return
	}
	fn := workers[name]
	if fn == nil {
		fmt.Fprintf(os.Stderr, "faults: no worker called %q\n", name)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// The parent holds our stdin open while it wants us running:
		// EOF means stop, also when the parent died.
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := fn(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "faults: worker %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Worker is a child process running a WorkerFunc: the current binary,
// executed again. It is the unit that Pause stops and resumes. A Worker's
// methods are safe for concurrent use.
type Worker struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error
}

// StartWorker starts the current binary again as the worker called name
// (see ServeWorker), with env added to this process's environment; the
// worker's standard output and error go to stdout and stderr (nil
// discards). The binary is also given the flag -test.run=^$, so a test
// binary whose TestMain forgot to call ServeWorker runs no tests instead
// of running them recursively. The worker runs in a process group of its
// own, so a terminal's Ctrl-C reaches only this process; the worker ends
// when this process does (its standard input closes). Stop the worker
// when done.
func StartWorker(name string, env []string, stdout, stderr io.Writer) (*Worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("faults: start worker: %w", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), EnvWorker+"="+name)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A group of its own, so that Pause's SIGSTOP cannot turn into a kill:
	// a stopped process in an orphaned process group gets SIGHUP and
	// SIGCONT from the kernel (POSIX), and the test binary's group is
	// orphaned when, say, the shell that started it as a background job
	// exits. Alone in its group, its parent (this process) in another
	// group of the same session, the worker's group is not orphaned while
	// this process runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("faults: start worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("faults: start worker %s: %w", name, err)
	}
	w := &Worker{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	return w, nil
}

// Name returns the worker's name.
func (w *Worker) Name() string { return w.name }

// PID returns the worker's process id.
func (w *Worker) PID() int { return w.cmd.Process.Pid }

// Done returns a channel closed when the worker process has exited.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Stop asks the worker to finish (its ctx ends), resumes it in case it is
// paused, and waits for it to exit. When ctx ends first it kills the
// process. It returns the process's exit error, or ctx's error joined with
// it when the worker had to be killed.
func (w *Worker) Stop(ctx context.Context) error {
	w.stdin.Close()
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		_ = w.cmd.Process.Kill()
		<-w.done
		return errors.Join(ctx.Err(), w.err)
	}
}

// Pause stops the worker process with SIGSTOP on Inject and resumes it with
// SIGCONT on Heal: the process freezes as in a long GC pause or a frozen
// VM, its timers and goroutines included, and sees, when it wakes, that
// time has passed. Hold it past the lease TTL to make a holder lose its
// lease while it believes it still holds it. Inject returns ErrNoTarget if
// the worker has exited.
func Pause(w *Worker) Fault {
	signal := func(sig syscall.Signal) func(context.Context) error {
		return func(context.Context) error {
			select {
			case <-w.done:
				return ErrNoTarget
			default:
			}
			if err := w.cmd.Process.Signal(sig); err != nil {
				if errors.Is(err, os.ErrProcessDone) {
					return ErrNoTarget
				}
				return fmt.Errorf("faults: signal worker %s: %w", w.name, err)
			}
			return nil
		}
	}
	resume := signal(syscall.SIGCONT)
	return &funcFault{kind: KindPause, inject: signal(syscall.SIGSTOP), heal: func(ctx context.Context) error {
		if err := resume(ctx); err != nil && !errors.Is(err, ErrNoTarget) {
			return err
		}
		return nil
	}}
}
