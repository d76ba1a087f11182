package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/owner"
)

const runHelp = `Acquire LOCK, run COMMAND while holding it, then release it.

The command runs in its own process group (in the terminal's foreground
when fencekit has it) with stdin, stdout and stderr passed through, and with FENCING_TOKEN (the fencing token's text form,
"<revision>:<lock>", for guard's Fencing-Token header or sqlguard) and
FENCEKIT_LOCK in its environment. SIGINT, SIGTERM and SIGHUP sent to
fencekit are forwarded to the command's process group (and to the
processes of its tree that left the group, on Linux).

When the lease is lost (renewals not confirmed in time, the record deleted,
the session revoked), the process group gets SIGTERM at once and SIGKILL
after --grace, and the cause is printed. The safety margin is widened to
cover --grace (it is --grace + 250 ms, at least a tenth of the TTL), so
when renewals stop, the command is dead before etcd can expire the session
and hand the lock to anyone else.

A watchdog process started next to the command holds the same deadline
as fencekit (the TTL from the last confirmed renewal, minus the margin), so
the command is also killed in time if fencekit itself is stopped or killed.

When the command exits, whatever it left running is stopped before the
lease is released: the rest of its process group (a background child,
"cmd &") and, on Linux, every descendant that left the group (setsid, a
double-forked daemon), which fencekit finds because it makes itself the
command's child subreaper (PR_SET_CHILD_SUBREAPER): orphans re-parent to
it, not to init. They get SIGTERM at once and SIGKILL after --grace;
the lease is held, and renewed, until they are gone, and fencekit says
so on stderr. The exit code stays the command's. To keep background work
under the lock, make the command wait for it (sh's "wait"). Not caught
without cgroups: work handed to another process's care (systemd-run, at,
a container runtime, a remote host), descendants of a fencekit that was
itself killed (the watchdog then kills the process group only), and, off
Linux, processes that left the process group. Then the lease is
released and the result checked.

Exit codes: the command's own code (128+N if signal N ended it); 75 not
acquired (held by anything with --try, or --wait ran out); 79 lease lost
(command killed, or the release found it lost); 64 usage error (including
LOCK used by others as another kind of lock or a semaphore of another
size: retrying cannot help); 69 connection error (etcd unreachable, TLS,
authentication or permission refused, outcome unknown: retrying may help);
70 internal error (a bug); 76 etcd server older than the supported
floor; 126 command not runnable; 127 command not found.`

type runFlags struct {
	conn     connFlags
	wait     time.Duration
	try      bool
	grace    time.Duration
	graceSet bool
	progress time.Duration
	verbose  bool
}

func cmdRun(args []string, e *Env) int {
	var f runFlags
	fs := newFlagSet("run", runHelp+"\n\n"+connHelp)
	f.conn.register(fs, e.Getenv, true)
	fs.DurationVar(&f.wait, "wait", 0, "give up when the lock is not acquired within this time (0: wait forever)")
	fs.BoolVar(&f.try, "try", false, "give up at once when the lock is held or waited for")
	fs.DurationVar(&f.grace, "grace", 0, "after SIGTERM on lease loss, wait this long before SIGKILL (default: a tenth of the TTL)")
	fs.DurationVar(&f.progress, "progress", 5*time.Second, "while waiting, print the time waited and the queue position this often (0: never)")
	fs.BoolVar(&f.verbose, "v", false, "print when the lock is acquired and released")
	lock, cmdline, err := parseRun(fs, args, e)
	if err != nil {
		return usageFail(e, "run", err)
	}
	fs.Visit(func(fl *flag.Flag) { f.graceSet = f.graceSet || fl.Name == "grace" })
	if !f.graceSet {
		f.grace = roundTTL(f.conn.ttl) / 10
	}
	if err := f.check(); err != nil {
		return usageFail(e, "run", err)
	}
	if err := lease.ValidateName(lock); err != nil {
		return usageFail(e, "run", err)
	}
	return f.run(lock, cmdline, e)
}

// parseRun parses "[flags] LOCK [flags] [--] COMMAND [ARGS...]": flags may
// come before and after LOCK; everything after "--", or from the first
// argument after LOCK that is not a flag, is the command.
func parseRun(fs *flagSet, args []string, e *Env) (lock string, cmdline []string, err error) {
	rest, dd, err := parseOne(fs, args)
	if err != nil {
		return "", nil, helpOr(fs, err, e)
	}
	if dd || len(rest) == 0 {
		return "", nil, errors.New("want LOCK -- COMMAND [ARGS...]")
	}
	lock, rest = rest[0], rest[1:]
	if len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
		if rest, _, err = parseOne(fs, rest); err != nil {
			return "", nil, helpOr(fs, err, e)
		}
	}
	if len(rest) == 0 {
		return "", nil, errors.New("no COMMAND after LOCK")
	}
	return lock, rest, nil
}

func (f *runFlags) check() error {
	if err := f.conn.check(); err != nil {
		return err
	}
	switch {
	case f.try && f.wait != 0:
		return errors.New("--try and --wait exclude each other")
	case f.wait < 0:
		return errors.New("--wait must not be negative")
	case f.grace < 0:
		return errors.New("--grace must not be negative")
	case f.progress < 0:
		return errors.New("--progress must not be negative")
	}
	ttl := roundTTL(f.conn.ttl)
	if m := f.margin(); 2*m >= ttl {
		if !f.graceSet {
			return fmt.Errorf("--ttl %v is too short for run: its safety margin of %v (--grace, a tenth of the TTL, plus 250ms) must be less than half the TTL; use a longer --ttl", ttl, m)
		}
		return fmt.Errorf("--grace %v needs a safety margin of %v, which must be less than half the TTL %v: use a longer --ttl or a shorter --grace", f.grace, m, ttl)
	}
	return nil
}

// margin is the lease safety margin: Done closes this long before the
// server could expire the session. It covers --grace, the watchdog's slack
// behind this process (watchdogSlack) and 150 ms for noticing and
// signalling, and is at least the library default.
func (f *runFlags) margin() time.Duration {
	ttl := roundTTL(f.conn.ttl)
	return max(ttl/10, 50*time.Millisecond, f.grace+watchdogSlack+150*time.Millisecond)
}

// roundTTL rounds d up to whole seconds, as lease.WithTTL does.
func roundTTL(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

func (f *runFlags) run(lock string, cmdline []string, e *Env) int {
	// Take the signals over before anything else, so that an INT during
	// the wait cancels it cleanly instead of killing fencekit with a
	// record left behind for the TTL.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	cli, err := f.conn.connect(e)
	if err != nil {
		return fail(e, "run", ExitConn, err)
	}
	defer cli.Close()
	locks, err := lease.New(cli, f.conn.options(lease.WithSafetyMargin(f.margin()))...)
	if err != nil {
		return fail(e, "run", ExitUsage, err)
	}
	defer locks.Close()

	l, code := f.acquire(locks, lock, sigc, e)
	if l == nil {
		return code
	}
	if f.verbose {
		fmt.Fprintf(e.Stderr, "fencekit run: acquired %q, fencing token %s\n", lock, l.Fence())
	}
	code, lost := f.supervise(l, cmdline, sigc, e)
	if lost {
		return ExitLost // reported by supervise
	}
	if err := l.Err(); err != nil {
		fmt.Fprintf(e.Stderr, "fencekit run: the command exited with code %d; the lease on %q was lost before it was released: %s\n", code, lock, lossCause(err))
		return ExitLost
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.conn.commandTimeout)
	defer cancel()
	err = l.Release(ctx)
	switch {
	case err == nil:
		if f.verbose {
			fmt.Fprintf(e.Stderr, "fencekit run: released %q (fence %d)\n", lock, l.Fence().Revision)
		}
		return code
	case errors.Is(err, lease.ErrNotOwner), errors.Is(err, lease.ErrNotFound), errors.Is(err, lease.ErrLost):
		fmt.Fprintf(e.Stderr, "fencekit run: the command exited with code %d, but the lease had been lost: %s\n", code, oneLine(err.Error()))
		return ExitLost
	}
	// Outcome unknown: closing the Client revokes the session, which
	// deletes the record.
	if cerr := locks.Close(); cerr != nil {
		fmt.Fprintf(e.Stderr, "fencekit run: the command exited with code %d; release outcome unknown (%s), and revoking the session failed (%s): the record goes when the session expires\n",
			code, oneLine(err.Error()), oneLine(cerr.Error()))
		return ExitConn
	}
	return code
}

// acquire takes the lock, printing progress while it waits. On failure it
// returns a nil lease and the exit code.
func (f *runFlags) acquire(locks *lease.Client, lock string, sigc <-chan os.Signal, e *Env) (*lease.Lease, int) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if f.try {
		tctx, tcancel := context.WithTimeout(ctx, f.conn.commandTimeout)
		defer tcancel()
		l, err := locks.TryAcquire(tctx, lock)
		if errors.Is(err, lease.ErrHeld) {
			fmt.Fprintf(e.Stderr, "fencekit run: lock %q is held%s; not waiting (--try)\n", lock, holderNote(locks, lock, f.conn.commandTimeout))
			return nil, ExitNotAcquired
		}
		if err != nil {
			return nil, fail(e, "run", exitCode(err), f.conn.explain(err))
		}
		return l, 0
	}
	if f.wait > 0 {
		var wcancel context.CancelFunc
		ctx, wcancel = context.WithTimeoutCause(ctx, f.wait, errWaitTimeout)
		defer wcancel()
	}
	type result struct {
		l   *lease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := locks.Acquire(ctx, lock)
		done <- result{l, err}
	}()
	start := time.Now()
	var tick <-chan time.Time
	if f.progress > 0 {
		t := time.NewTicker(f.progress)
		defer t.Stop()
		tick = t.C
	}
	var sig os.Signal
	for {
		select {
		case r := <-done:
			switch {
			case r.err == nil:
				return r.l, 0
			case sig != nil:
				fmt.Fprintf(e.Stderr, "fencekit run: %v while waiting for lock %q; not acquired\n", sig, lock)
				return nil, 128 + int(sig.(syscall.Signal))
			case errors.Is(r.err, errWaitTimeout):
				fmt.Fprintf(e.Stderr, "fencekit run: lock %q not acquired within %v (--wait); held%s\n", lock, f.wait, holderNote(locks, lock, f.conn.commandTimeout))
				return nil, ExitNotAcquired
			}
			return nil, fail(e, "run", exitCode(r.err), f.conn.explain(r.err))
		case s := <-sigc:
			if sig == nil {
				sig = s
				cancel(errInterrupted)
			}
		case <-tick:
			fmt.Fprintf(e.Stderr, "fencekit run: waiting for lock %q for %v%s\n", lock, time.Since(start).Round(100*time.Millisecond), queueNote(locks, lock, f.conn.commandTimeout))
		}
	}
}

var (
	errWaitTimeout = errors.New("--wait ran out")
	errInterrupted = errors.New("interrupted")
)

// holderNote describes the lock's holder for a message, or returns "".
func holderNote(locks *lease.Client, lock string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := locks.Inspect(ctx, lock)
	if err != nil || st.Holder == nil {
		return ""
	}
	h := st.Holder
	return fmt.Sprintf(" by fence %d (owner %s on %s)", h.Fence.Revision, h.OwnerDigest, orDash(h.Instance))
}

// queueNote gives this process's position in the lock's queue, found by
// its owner tokens' instance id and process-start epoch.
func queueNote(locks *lease.Client, lock string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := locks.Inspect(ctx, lock)
	if err != nil {
		return fmt.Sprintf(" (queue unknown: %s)", oneLine(err.Error()))
	}
	recs := st.Waiters
	if st.Holder != nil {
		recs = append([]lease.Record{*st.Holder}, recs...)
	}
	me := owner.ProcessStart().UnixMilli()
	for i, r := range recs {
		if r.Instance == owner.Default().Instance() && r.Since.UnixMilli() == me {
			if i == 0 {
				return ", at the head of the queue"
			}
			return fmt.Sprintf(", waiter %d of %d (holder: fence %d, owner %s on %s)", i, len(recs)-1,
				recs[0].Fence.Revision, recs[0].OwnerDigest, orDash(recs[0].Instance))
		}
	}
	return fmt.Sprintf(", %d in the queue", len(recs))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// supervise runs the command while l is held and returns its exit code,
// or lost after killing it when l is lost (or could not be confirmed in
// time).
//
// Besides watching l.Done, it confirms the lease (l.Renew) every quarter
// TTL and keeps a deadline: the TTL from when the last confirmed renewal
// was sent, minus the safety margin. A watchdog process (see watchdog.go)
// holds the same deadline, so the command is killed in time even if this
// process is stopped or killed; this process kills it at the deadline too.
func (f *runFlags) supervise(l *lease.Lease, cmdline []string, sigc <-chan os.Signal, e *Env) (code int, lost bool) {
	ttl := roundTTL(f.conn.ttl)
	validFor := func(sent time.Time) time.Time { return sent.Add(ttl - f.margin()) }
	sent := time.Now()
	rctx, rcancel := context.WithTimeout(context.Background(), ttl/4)
	err := l.Renew(rctx)
	rcancel()
	if err != nil {
		if l.Err() != nil {
			fmt.Fprintf(e.Stderr, "fencekit run: lease on %q lost before the command started: %s\n", l.Name(), lossCause(l.Err()))
			return ExitLost, true
		}
		return fail(e, "run", ExitConn, err), false
	}
	deadline := validFor(sent)

	if err := becomeSubreaper(); err != nil {
		fmt.Fprintf(e.Stderr, "fencekit run: warning: %s: processes that leave the command's process group will not be found\n", oneLine(err.Error()))
	}
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	cmd.Env = append(withoutVars(os.Environ(), "FENCING_TOKEN", "FENCEKIT_LOCK"),
		"FENCING_TOKEN="+l.Fence().String(), "FENCEKIT_LOCK="+l.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if in, ok := e.Stdin.(*os.File); ok {
		if fd, ok := foregroundTTY(in); ok {
			cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, fd
			defer takeBackTTY(fd)
		}
	}
	if err := cmd.Start(); err != nil {
		code := ExitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return fail(e, "run", code, err), false
	}
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	wd, err := startWatchdog(pgid, f.grace, time.Until(deadline)+watchdogSlack, e.Stderr)
	skip := -1 // the watchdog, not the command's
	if err != nil {
		fmt.Fprintf(e.Stderr, "fencekit run: warning: %s: the command is not protected against fencekit itself being stopped\n", oneLine(err.Error()))
	} else {
		defer wd.stop()
		skip = wd.cmd.Process.Pid
	}

	type renewal struct {
		sent time.Time
		err  error
	}
	renewed := make(chan renewal, 1)
	renewing := false
	renewTick := time.NewTicker(ttl / 4)
	defer renewTick.Stop()
	own := time.NewTimer(time.Until(deadline))
	defer own.Stop()

	var (
		killc   <-chan time.Time
		waitErr error
		left    *time.Ticker // while what the command left is stopped
		leftc   <-chan time.Time
	)
	kill := func(cause string) {
		if lost {
			return
		}
		lost = true
		if wd != nil {
			wd.dismiss() // this process does the killing
		}
		signalTree(pgid, skip, syscall.SIGTERM)
		fmt.Fprintf(e.Stderr, "fencekit run: lease on %q lost: %s; sent SIGTERM to the command, SIGKILL in %v\n", l.Name(), cause, f.grace)
		t := time.NewTimer(f.grace)
		killc = t.C
	}
loop:
	for {
		select {
		case waitErr = <-exited:
			exited = nil
			if lost || !f.stopLeftovers(pgid, skip, waitCode(waitErr, cmd.ProcessState), e) {
				break loop
			}
			// Hold the lease until they are gone: SIGTERM now, SIGKILL
			// after --grace.
			left = time.NewTicker(20 * time.Millisecond)
			defer left.Stop()
			leftc = left.C
			killc = time.NewTimer(f.grace).C
		case <-leftc:
			if _, alive := leftovers(pgid, skip, true); !alive {
				break loop
			}
		case s := <-sigc:
			signalTree(pgid, skip, s.(syscall.Signal))
		case <-l.Done():
			kill(lossCause(l.Err()))
		case <-own.C:
			kill(fmt.Sprintf("no renewal confirmed within %v", ttl-f.margin()))
		case <-killc:
			signalTree(pgid, skip, syscall.SIGKILL)
			killc = nil
		case <-renewTick.C:
			if renewing || lost {
				continue
			}
			renewing = true
			go func() {
				sent := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), ttl/4)
				defer cancel()
				renewed <- renewal{sent, l.Renew(ctx)}
			}()
		case r := <-renewed:
			renewing = false
			if r.err != nil || lost {
				continue // a loss shows through Done; else the deadline stands
			}
			deadline = validFor(r.sent)
			own.Reset(time.Until(deadline))
			if wd != nil {
				wd.valid(time.Until(deadline) + watchdogSlack)
			}
		}
	}
	if renewing {
		<-renewed
	}
	if lost {
		// Whatever the command left goes too.
		signalTree(pgid, skip, syscall.SIGKILL)
		return ExitLost, true
	}
	code = waitCode(waitErr, cmd.ProcessState)
	// The exit and the loss can arrive together (after a stop, say); the
	// command's code counts only if the lease held until it exited.
	if err := l.Err(); err != nil {
		fmt.Fprintf(e.Stderr, "fencekit run: the command exited with code %d, but the lease on %q was lost: %s\n", code, l.Name(), lossCause(err))
		return code, true
	}
	if time.Now().After(deadline) {
		fmt.Fprintf(e.Stderr, "fencekit run: the command exited with code %d, but no renewal of the lease on %q was confirmed within %v before\n", code, l.Name(), ttl-f.margin())
		return code, true
	}
	return code, false
}

// stopLeftovers is called when the command has exited with code: when it
// left processes running (in its process group, or re-parented to this
// process, see leftovers), it sends them SIGTERM, says so, and reports
// true; the caller then holds the lease until they are gone, sending
// SIGKILL after --grace.
func (f *runFlags) stopLeftovers(pgid, skip, code int, e *Env) bool {
	pids, alive := leftovers(pgid, skip, true)
	if !alive {
		return false
	}
	signalTree(pgid, skip, syscall.SIGTERM)
	what := "processes in its process group"
	if pids != nil {
		what = fmt.Sprintf("%d process(es) (pid %s)", len(pids), joinInts(pids))
	}
	fmt.Fprintf(e.Stderr, "fencekit run: the command exited with code %d but left %s running; sent SIGTERM, SIGKILL in %v; the lease is released once they are gone\n",
		code, what, f.grace)
	return true
}

// signalTree sends sig to the command's process group and to every other
// process of its tree that leftovers finds (on Linux, those that left the
// group too).
func signalTree(pgid, skip int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	pids, _ := leftovers(pgid, skip, false)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

func joinInts(ns []int) string {
	slices.Sort(ns)
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// lossCause says why a lease ended, in one line.
func lossCause(err error) string {
	var le *lease.LostError
	if errors.As(err, &le) {
		return oneLine(le.Cause.Error())
	}
	if err == nil {
		return "unknown"
	}
	return oneLine(err.Error())
}

// waitCode is the exit code of a finished command: its own, or 128+N when
// signal N ended it.
func waitCode(err error, ps *os.ProcessState) int {
	if ps == nil {
		return ExitCannotExec
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// withoutVars returns env without the named variables.
func withoutVars(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			if name == n {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
