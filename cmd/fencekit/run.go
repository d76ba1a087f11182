package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/admin"
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

When someone asks the holder to let go ("fencekit release --ask --fence
N LOCK", admin.Admin.RequestRelease), the command's process group gets
SIGTERM, and the lock is released once the command exits; the exit code
stays the command's. --max-hold D ends the lease after D even while its
renewals succeed (the command is killed as on any loss, exit 79, and the
lock passes on): for a job that may wedge while its process lives.
--lock-delay D makes the lock wait D (rounded up to whole seconds, at
most 1m) before the next holder starts when this run's hold ends without
a release: fencekit or its host died or was cut off, the lock was force
released, or --max-hold ended it. A late write of the lost run then lands
before the next run starts, for resources that cannot check
FENCING_TOKEN. The delay is kept in etcd, so every other run and Client
honours it; a normal exit releases at once ("fencekit status" shows a
pending delay as "lock-delay until").
--metadata TEXT stores a note with the lock's record (a job id, why it
runs), which "fencekit status" shows; anyone who may read the prefix can
read it.

With -n N, the command runs under one of N permits of a semaphore called
LOCK (lease.Client.Semaphore: the same records, FIFO across processes, at
most N holders at once), for "no more than N of these jobs at a time".
Every run of it must use the same N; LOCK used by others as a lock, or
with another N, is refused (64). A permit has no fencing token (several
holders hold it at once, so "newest token wins" would refuse the older,
still valid ones): FENCING_TOKEN is not set. FENCEKIT_PERMIT_REVISION
(the permit record's etcd creation revision, which is not a fencing token)
and FENCEKIT_PERMITS (N) are set instead, with FENCEKIT_LOCK. Loss, signals,
--try, --wait and the watchdog work as for a lock.

Exit codes: the command's own code (128+N if signal N ended it); 75 not
acquired (held by anything with --try, or --wait ran out); 79 lease lost
(command killed, or the release found it lost); 64 usage error (including
LOCK used by others as another kind of lock or a semaphore of another
size: retrying cannot help); 69 connection error (etcd unreachable, TLS,
authentication or permission refused, outcome unknown: retrying may help);
70 internal error (a bug); 76 etcd server older than the supported
floor; 126 command not runnable; 127 command not found.`

type runFlags struct {
	cmd        string // "run" or "elect", for messages
	conn       connFlags
	permits    int           // -n: a semaphore of this many permits; 0 for a lock
	locks      *lease.Client // set once connected
	ops        *admin.Admin  // the operator's tools over locks' prefix, set with locks
	wait       time.Duration
	try        bool
	grace      time.Duration
	graceSet   bool
	permitsSet bool
	progress   time.Duration
	verbose    bool
	maxHold    time.Duration // --max-hold: end the lease after this long (0: no cap)
	metadata   string        // --metadata: a note stored with the record
	lockDelay  time.Duration // --lock-delay: delay the next holder after a hold that ends unreleased (0: none)
}

func cmdRun(args []string, e *Env) int {
	f := runFlags{cmd: "run"}
	fs := newFlagSet("run", runHelp+"\n\n"+connHelp)
	f.conn.register(fs, e.Getenv, true)
	fs.IntVar(&f.permits, "n", 0, "run under one of N permits of a semaphore called LOCK (at most N such runs at once; no FENCING_TOKEN) instead of the lock LOCK")
	fs.DurationVar(&f.wait, "wait", 0, "give up when the lock is not acquired within this time (0: wait forever)")
	fs.BoolVar(&f.try, "try", false, "give up at once when the lock is held or waited for")
	fs.DurationVar(&f.grace, "grace", 0, "after SIGTERM on lease loss, wait this long before SIGKILL (default: a tenth of the TTL)")
	fs.DurationVar(&f.progress, "progress", 5*time.Second, "while waiting, print the time waited and the queue position this often (0: never)")
	fs.BoolVar(&f.verbose, "v", false, "print when the lock is acquired and released")
	fs.DurationVar(&f.maxHold, "max-hold", 0, "end the lease after this long even while renewals succeed: the command is killed and the lock passes on (0: no cap; not with -n)")
	fs.DurationVar(&f.lockDelay, "lock-delay", 0, "when the hold ends without a release (crash, partition, force release, --max-hold), the next holder waits this long (rounded up to seconds, at most 1m; 0: none; not with -n)")
	fs.StringVar(&f.metadata, "metadata", "", "a note stored with the lock's record, shown by 'fencekit status' (at most 256 bytes, no control characters; not with -n)")
	lock, cmdline, err := parseRun(fs, args, e)
	if err != nil {
		return usageFail(e, "run", err)
	}
	fs.Visit(func(fl *flag.Flag) {
		f.graceSet = f.graceSet || fl.Name == "grace"
		f.permitsSet = f.permitsSet || fl.Name == "n"
	})
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
		return fmt.Errorf("--wait %v must not be negative", f.wait)
	case f.grace < 0:
		return fmt.Errorf("--grace %v must not be negative", f.grace)
	case f.progress < 0:
		return fmt.Errorf("--progress %v must not be negative", f.progress)
	case f.permitsSet && (f.permits < 1 || f.permits > lease.MaxPermits):
		return fmt.Errorf("-n %d: want 1..%d permits (or no -n for a lock)", f.permits, lease.MaxPermits)
	}
	if _, err := f.acquireOptions(); err != nil {
		return err
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

// acquireOptions are the lease options of --max-hold, --lock-delay and
// --metadata; an invalid one is an error naming its flag.
func (f *runFlags) acquireOptions() ([]lease.AcquireOption, error) {
	switch {
	case f.maxHold < 0:
		return nil, fmt.Errorf("--max-hold %v must not be negative", f.maxHold)
	case f.lockDelay < 0:
		return nil, fmt.Errorf("--lock-delay %v must not be negative", f.lockDelay)
	case f.permitsSet && (f.maxHold > 0 || f.metadata != "" || f.lockDelay > 0):
		return nil, errors.New("--max-hold, --lock-delay and --metadata apply to a lock, not to a permit (-n)")
	}
	var opts []lease.AcquireOption
	if f.maxHold > 0 {
		opts = append(opts, lease.WithMaxHold(f.maxHold))
	}
	if f.lockDelay > 0 {
		if err := lease.ValidateLockDelay(f.lockDelay); err != nil {
			return nil, fmt.Errorf("--lock-delay: %w", err)
		}
		opts = append(opts, lease.WithLockDelay(f.lockDelay))
	}
	if f.metadata != "" {
		if err := lease.ValidateMetadata(f.metadata); err != nil {
			return nil, fmt.Errorf("--metadata: %w", err)
		}
		opts = append(opts, lease.WithMetadata(f.metadata))
	}
	return opts, nil
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
	sigc, locks, done, code := f.start(e)
	if locks == nil {
		return code
	}
	defer done()
	acq, err := f.acquirer(locks, lock)
	if err != nil {
		return fail(e, f.cmd, exitCode(err), err)
	}
	h, code := f.acquire(acq, lock, sigc, e)
	if h == nil {
		return code
	}
	return f.hold(locks, h, cmdline, sigc, e)
}

// start takes the signals over (before anything else, so that an INT
// during the wait cancels it cleanly instead of killing fencekit with a
// record left behind for the TTL), connects and makes the lease Client
// (also f.locks). On failure it returns a nil Client and the exit code;
// otherwise done undoes it all.
func (f *runFlags) start(e *Env) (sigc <-chan os.Signal, locks *lease.Client, done func(), code int) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	cli, err := f.conn.connect(e)
	if err != nil {
		signal.Stop(ch)
		return nil, nil, nil, fail(e, f.cmd, ExitConn, err)
	}
	locks, err = lease.New(cli, f.conn.options(lease.WithSafetyMargin(f.margin()))...)
	if err != nil {
		cli.Close()
		signal.Stop(ch)
		return nil, nil, nil, fail(e, f.cmd, ExitUsage, err)
	}
	f.locks = locks
	if f.ops, err = admin.New(cli, locks.Prefix()); err != nil {
		locks.Close()
		cli.Close()
		signal.Stop(ch)
		return nil, nil, nil, fail(e, f.cmd, ExitUsage, err)
	}
	return ch, locks, func() {
		locks.Close()
		cli.Close()
		signal.Stop(ch)
	}, 0
}

// hold runs the command under h, then releases h, and returns the exit
// code.
func (f *runFlags) hold(locks *lease.Client, h *holding, cmdline []string, sigc <-chan os.Signal, e *Env) int {
	if f.verbose {
		fmt.Fprintf(e.Stderr, "fencekit %s: acquired %q, %s\n", f.cmd, h.name, h.desc)
	}
	code, lost := f.supervise(h, cmdline, sigc, e)
	if lost {
		return ExitLost // reported by supervise
	}
	if err := h.Err(); err != nil {
		fmt.Fprintf(e.Stderr, "fencekit %s: the command exited with code %d; the %s on %q was lost before it was released: %s\n", f.cmd, code, h.what, h.name, lossCause(err))
		return ExitLost
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.conn.commandTimeout)
	defer cancel()
	err := release(ctx, h.Handle)
	switch {
	case err == nil:
		if f.verbose {
			fmt.Fprintf(e.Stderr, "fencekit %s: released %q (%s)\n", f.cmd, h.name, h.desc)
		}
		return code
	case errors.Is(err, lease.ErrNotOwner), errors.Is(err, lease.ErrNotFound), errors.Is(err, lease.ErrLost):
		fmt.Fprintf(e.Stderr, "fencekit %s: the command exited with code %d, but the %s had been lost: %s\n", f.cmd, code, h.what, oneLine(err.Error()))
		return ExitLost
	}
	// Outcome unknown: closing the Client revokes the session, which
	// deletes the record.
	if cerr := locks.Close(); cerr != nil {
		fmt.Fprintf(e.Stderr, "fencekit %s: the command exited with code %d; release outcome unknown (%s), and revoking the session failed (%s): the record goes when the session expires\n",
			f.cmd, code, oneLine(err.Error()), oneLine(cerr.Error()))
		return ExitConn
	}
	return code
}

// holding is what a run holds while its command runs (a *lease.Lease, a
// *lease.Permit with -n, or an election's *lease.Term), with what the
// command and the messages say of it.
type holding struct {
	lease.Handle
	name string   // the lock's or election's name
	what string   // "lease", "permit" or "term", for messages
	desc string   // its token, for messages
	env  []string // variables the command gets
}

// envVars are the variables fencekit sets for the command; it removes
// them from what it inherits first, so that an outer run's token never
// reaches an inner command.
var envVars = []string{"FENCING_TOKEN", "FENCEKIT_LOCK", "FENCEKIT_PERMIT_REVISION", "FENCEKIT_PERMITS", "FENCEKIT_ELECTION"}

func leaseHolding(l *lease.Lease) *holding {
	return &holding{Handle: l, name: l.Name(), what: "lease", desc: "fencing token " + l.Fence().String(),
		env: []string{"FENCING_TOKEN=" + l.Fence().String(), "FENCEKIT_LOCK=" + l.Name()}}
}

func permitHolding(p *lease.Permit, n int) *holding {
	rev := strconv.FormatInt(p.Revision(), 10)
	return &holding{Handle: p, name: p.Name(), what: "permit", desc: fmt.Sprintf("permit revision %s of %d (no fencing token)", rev, n),
		env: []string{"FENCEKIT_LOCK=" + p.Name(), "FENCEKIT_PERMIT_REVISION=" + rev, "FENCEKIT_PERMITS=" + strconv.Itoa(n)}}
}

// acquirer is how run waits for its lock: take it if free, or wait.
type acquirer struct {
	try, wait func(ctx context.Context) (*holding, error)
}

// acquirer returns the acquirer of lock: a lease, or with -n a permit.
func (f *runFlags) acquirer(locks *lease.Client, lock string) (acquirer, error) {
	if f.permits == 0 {
		opts, err := f.acquireOptions()
		if err != nil {
			return acquirer{}, err
		}
		return acquirer{
			try:  func(ctx context.Context) (*holding, error) { return wrapHeld(locks.TryAcquire(ctx, lock, opts...)) },
			wait: func(ctx context.Context) (*holding, error) { return wrapHeld(locks.Acquire(ctx, lock, opts...)) },
		}, nil
	}
	sem, err := locks.Semaphore(lock, f.permits)
	if err != nil {
		return acquirer{}, err
	}
	permit := func(p *lease.Permit, err error) (*holding, error) {
		if err != nil {
			return nil, err
		}
		return permitHolding(p, f.permits), nil
	}
	return acquirer{
		try:  func(ctx context.Context) (*holding, error) { return permit(sem.TryAcquire(ctx)) },
		wait: func(ctx context.Context) (*holding, error) { return permit(sem.Acquire(ctx)) },
	}, nil
}

func wrapHeld(l *lease.Lease, err error) (*holding, error) {
	if err != nil {
		return nil, err
	}
	return leaseHolding(l), nil
}

// acquire takes the lock, printing progress while it waits. On failure it
// returns nil and the exit code.
func (f *runFlags) acquire(acq acquirer, lock string, sigc <-chan os.Signal, e *Env) (*holding, int) {
	if f.try {
		return f.tryAcquire(acq, lock, e)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if f.wait > 0 {
		var wcancel context.CancelFunc
		ctx, wcancel = context.WithTimeoutCause(ctx, f.wait, errWaitTimeout)
		defer wcancel()
	}
	type result struct {
		h   *holding
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := acq.wait(ctx)
		done <- result{h, err}
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
				return r.h, 0
			case sig != nil:
				fmt.Fprintf(e.Stderr, "fencekit %s: %v while waiting for %s %q; not acquired\n", f.cmd, sig, f.noun(), lock)
				return nil, 128 + int(sig.(syscall.Signal))
			case errors.Is(r.err, errWaitTimeout):
				fmt.Fprintf(e.Stderr, "fencekit %s: %s %q not acquired within %v (--wait); held%s\n", f.cmd, f.noun(), lock, f.wait, f.note(lock))
				return nil, ExitNotAcquired
			}
			return nil, fail(e, f.cmd, exitCode(r.err), f.explain(r.err))
		case s := <-sigc:
			if sig == nil {
				sig = s
				cancel(errInterrupted)
			}
		case <-tick:
			fmt.Fprintf(e.Stderr, "fencekit %s: waiting for %s %q for %v%s\n", f.cmd, f.noun(), lock, time.Since(start).Round(100*time.Millisecond), f.queueNote(lock))
		}
	}
}

// tryAcquire takes the lock if it is free (--try). On failure it returns
// nil and the exit code.
func (f *runFlags) tryAcquire(acq acquirer, lock string, e *Env) (*holding, int) {
	ctx, cancel := context.WithTimeout(context.Background(), f.conn.commandTimeout)
	defer cancel()
	h, err := acq.try(ctx)
	if errors.Is(err, lease.ErrHeld) {
		fmt.Fprintf(e.Stderr, "fencekit %s: %s %q is held%s; not waiting (--try)\n", f.cmd, f.noun(), lock, f.note(lock))
		return nil, ExitNotAcquired
	}
	if err != nil {
		return nil, fail(e, f.cmd, exitCode(err), f.explain(err))
	}
	return h, 0
}

// explain rewords an error that a flag caused so that it names the flag.
func (f *runFlags) explain(err error) error {
	if errors.Is(err, lease.ErrMismatch) && f.cmd == "run" {
		return fmt.Errorf("%w (-n must match what the others use: none for a lock, the same N for a semaphore)", err)
	}
	return f.conn.explain(err)
}

// noun names what run waits for, in messages.
func (f *runFlags) noun() string {
	switch {
	case f.cmd == "elect":
		return "election"
	case f.permits > 0:
		return "semaphore"
	}
	return "lock"
}

var (
	errWaitTimeout = errors.New("--wait ran out")
	errInterrupted = errors.New("interrupted")
)

// note describes who holds lock for a message, or returns "".
func (f *runFlags) note(lock string) string {
	ctx, cancel := context.WithTimeout(context.Background(), f.conn.commandTimeout)
	defer cancel()
	st, err := f.ops.Inspect(ctx, lock)
	switch {
	case err == nil && st.Holder == nil && !st.DelayedUntil.IsZero():
		return fmt.Sprintf(" (a holder vanished without releasing: lock-delay until ~%s)", st.DelayedUntil.UTC().Format(time.RFC3339))
	case err != nil || st.Holder == nil:
		return ""
	}
	if f.permits > 0 {
		return fmt.Sprintf(" (%d of %d permits held)", holders(st), f.permits)
	}
	h := st.Holder
	return fmt.Sprintf(" by fence %d (owner %s on %s)", h.Fence.Revision, h.OwnerDigest, orDash(h.Instance))
}

// holders counts the records of st that hold it.
func holders(st *admin.LockState) int {
	n := 0
	if st.Holder != nil {
		n++
	}
	for _, w := range st.Waiters {
		if w.Held {
			n++
		}
	}
	return n
}

// queueNote gives this process's position in the lock's queue, found by
// its owner tokens' instance id and process-start epoch.
func (f *runFlags) queueNote(lock string) string {
	ctx, cancel := context.WithTimeout(context.Background(), f.conn.commandTimeout)
	defer cancel()
	st, err := f.ops.Inspect(ctx, lock)
	if err != nil {
		return fmt.Sprintf(" (queue unknown: %s)", oneLine(err.Error()))
	}
	recs := st.Waiters
	if st.Holder != nil {
		recs = append([]admin.Record{*st.Holder}, recs...)
	}
	nheld := holders(st)
	me := owner.ProcessStart().UnixMilli()
	for i, r := range recs {
		if r.Instance != owner.Default().Instance() || r.Since.UnixMilli() != me {
			continue
		}
		switch {
		case i < nheld:
			return ", at the head of the queue"
		case f.permits > 0:
			return fmt.Sprintf(", waiter %d of %d (%d of %d permits held)", i-nheld+1, len(recs)-nheld, nheld, f.permits)
		}
		return fmt.Sprintf(", waiter %d of %d (holder: fence %d, owner %s on %s)", i, len(recs)-1,
			recs[0].Fence.Revision, recs[0].OwnerDigest, orDash(recs[0].Instance))
	}
	return fmt.Sprintf(", %d in the queue", len(recs))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
	fmt.Fprintf(e.Stderr, "fencekit %s: the command exited with code %d but left %s running; sent SIGTERM, SIGKILL in %v; the lock is released once they are gone\n",
		f.cmd, code, what, f.grace)
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
