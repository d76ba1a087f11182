package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/lease"
)

const electHelp = `Campaign in election NAME, publishing VALUE (default: empty; at most
lease.MaxValueLen bytes), run COMMAND while leading, and resign when it
exits, so the next candidate leads. The election's records and semantics are
lease.Client.Election's: candidates lead in the order they campaigned.

While it waits to lead, elect is a candidate: it prints the time waited and
its place in the queue every --progress. Once it leads, COMMAND runs as
under "fencekit run": in its own process group, signals forwarded, killed
(SIGTERM, SIGKILL after --grace) the moment the term is lost or cannot be
confirmed in time, its leftovers stopped before the resignation, a watchdog
process next to it. It gets FENCING_TOKEN (the term's fencing token,
"<revision>:<name>": send it with every write the leader makes) and
FENCEKIT_ELECTION=NAME.

Exit codes: the command's own code (128+N if signal N ended it); 75
--wait ran out before leading; 79 term lost (command killed, or the
resignation found it lost); 64 usage error (including NAME used by others as
a lock or semaphore); 69 connection error; 70 internal error (a bug); 76
etcd server older than the supported floor; 126 command not runnable; 127
command not found.`

const observeHelp = `Print the leader of election NAME, then every change of leader (and of
the value it publishes) in the order etcd applied them, until interrupted
(SIGINT or SIGTERM: exit 0). Each line gives when the leader took office by
its own clock ("since", "-" until it published that), its term's fence and
the value it published; "no leader" when nobody leads, "no leader, lock-delay
until ~T" (JSON: delayed_until) when a leader that held the name with a
lock-delay ("run --lock-delay") vanished without releasing and nobody may
lead until about T. After a gap in what
etcd still had (its history compacted while the link was cut), the next line
says "gap": leaders between the two lines may be missing.

Exit codes: 0 interrupted; 64 usage error; 69 connection error (etcd
unreachable within --dial-timeout at the start; later, the watch retries).`

const leaderHelp = `Print the leader of election NAME: its fence, since (by its own clock) and
value. When nobody leads it says so on stderr: "has no leader", or "has no
leader, lock-delay until ~T" (JSON: delayed_until) while the election waits
out the lock-delay of a leader that vanished without releasing.

Exit codes: 0 a leader was printed; 1 nobody leads (also during a
lock-delay); 64 usage error; 69 connection error.`

func cmdElect(args []string, e *Env) int {
	f := runFlags{cmd: "elect"}
	fs := newFlagSet("elect", electHelp+"\n\n"+connHelp)
	f.conn.register(fs, e.Getenv, true)
	fs.DurationVar(&f.wait, "wait", 0, "give up when not leading within this time (0: wait forever)")
	fs.DurationVar(&f.grace, "grace", 0, "after SIGTERM on the loss of the term, wait this long before SIGKILL (default: a tenth of the TTL)")
	fs.DurationVar(&f.progress, "progress", 5*time.Second, "while waiting, print the time waited and the queue position this often (0: never)")
	fs.BoolVar(&f.verbose, "v", false, "print when leading starts and ends")
	name, value, cmdline, err := parseElect(fs, args, e)
	if err != nil {
		return usageFail(e, "elect", err)
	}
	fs.Visit(func(fl *flag.Flag) { f.graceSet = f.graceSet || fl.Name == "grace" })
	if !f.graceSet {
		f.grace = roundTTL(f.conn.ttl) / 10
	}
	if err := f.check(); err != nil {
		return usageFail(e, "elect", err)
	}
	if err := lease.ValidateName(name); err != nil {
		return usageFail(e, "elect", err)
	}
	if len(value) > lease.MaxValueLen {
		return usageFail(e, "elect", fmt.Errorf("VALUE is %d bytes, more than %d", len(value), lease.MaxValueLen))
	}
	return f.elect(name, value, cmdline, e)
}

// parseElect parses "[flags] NAME [VALUE] [flags] -- COMMAND [ARGS...]":
// the "--" is required, since VALUE is optional.
func parseElect(fs *flagSet, args []string, e *Env) (name, value string, cmdline []string, err error) {
	i := slices.Index(args, "--")
	if i < 0 {
		// Flags alone may still ask for help.
		if _, err := parse(fs, args, e); err != nil {
			return "", "", nil, err
		}
		return "", "", nil, errors.New("want NAME [VALUE] -- COMMAND [ARGS...]")
	}
	pos, err := parse(fs, args[:i], e)
	if err != nil {
		return "", "", nil, err
	}
	cmdline = args[i+1:]
	switch {
	case len(pos) == 0:
		return "", "", nil, errors.New("want NAME [VALUE] -- COMMAND [ARGS...]")
	case len(pos) > 2:
		return "", "", nil, fmt.Errorf("unexpected argument %q before --: want NAME [VALUE]", pos[2])
	case len(cmdline) == 0:
		return "", "", nil, errors.New("no COMMAND after --")
	}
	if len(pos) == 2 {
		value = pos[1]
	}
	return pos[0], value, cmdline, nil
}

func (f *runFlags) elect(name, value string, cmdline []string, e *Env) int {
	sigc, locks, done, code := f.start(e)
	if locks == nil {
		return code
	}
	defer done()
	el, err := locks.Election(name)
	if err != nil {
		return fail(e, f.cmd, exitCode(err), err)
	}
	campaign := func(ctx context.Context) (*holding, error) {
		t, err := el.Campaign(ctx, value)
		if err != nil {
			return nil, err
		}
		return termHolding(t), nil
	}
	h, code := f.acquire(acquirer{try: campaign, wait: campaign}, name, sigc, e)
	if h == nil {
		return code
	}
	return f.hold(locks, h, cmdline, sigc, e)
}

// release gives h back. A term is resigned, unless "fencekit transfer"
// asked for it: then it is transferred to the candidate named, or
// resigned all the same if that one has left.
func release(ctx context.Context, h lease.Handle) error {
	t, ok := h.(*lease.Term)
	if !ok {
		return h.Release(ctx)
	}
	to, ok := t.TransferRequested()
	if !ok {
		return t.Release(ctx)
	}
	err := t.Transfer(ctx, to)
	var nc *lease.NotCandidateError
	if errors.As(err, &nc) && !nc.Resigned {
		return t.Release(ctx) // the candidate left: step down all the same
	}
	return err
}

func termHolding(t *lease.Term) *holding {
	tok := t.Fence().String()
	return &holding{Handle: t, name: t.Name(), what: "term", desc: "fencing token " + tok,
		env: []string{"FENCING_TOKEN=" + tok, "FENCEKIT_ELECTION=" + t.Name()}}
}

// leaderJSON is a leader in "observe --json" and "leader --json" output.
type leaderJSON struct {
	Election     string    `json:"election"`
	Leader       bool      `json:"leader"`
	Fence        int64     `json:"fence,omitempty"`
	FencingToken string    `json:"fencing_token,omitempty"`
	Since        time.Time `json:"since,omitzero"`
	Value        string    `json:"value"`
	Gap          bool      `json:"gap,omitempty"`
	// DelayedUntil is set, with no leader, while the election waits out
	// a lock-delay.
	DelayedUntil *time.Time `json:"delayed_until,omitempty"`
}

func toLeaderJSON(name string, l lease.Leader) leaderJSON {
	j := leaderJSON{Election: name, Leader: !l.IsZero(), Since: l.Since, Value: l.Value, Gap: l.Gap}
	if !l.IsZero() {
		j.Fence, j.FencingToken = l.Term.Revision, l.Term.String()
	}
	if !l.DelayedUntil.IsZero() {
		j.DelayedUntil = &l.DelayedUntil
	}
	return j
}

// leaderText is a leader in one line.
func leaderText(l lease.Leader) string {
	gap := ""
	if l.Gap {
		gap = "gap (leaders may be missing before this one); "
	}
	if l.IsZero() {
		return gap + noLeaderText(l.DelayedUntil)
	}
	since := "-"
	if !l.Since.IsZero() {
		since = l.Since.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%sfence %d since %s value %q", gap, l.Term.Revision, since, l.Value)
}

// noLeaderText says that nobody leads, and, if until is set, that the
// election waits out a lock-delay until about then.
func noLeaderText(until time.Time) string {
	if until.IsZero() {
		return "no leader"
	}
	return "no leader, lock-delay until ~" + until.UTC().Format(time.RFC3339)
}

// electionFlags parses the flags and the one NAME of observe and leader.
func electionFlags(cmd, help string, args []string, e *Env) (*connFlags, string, bool, int) {
	var conn connFlags
	fs := newFlagSet(cmd, help+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	asJSON := fs.Bool("json", false, "print JSON (observe: one object per line)")
	pos, err := parse(fs, args, e)
	switch {
	case err != nil:
	case len(pos) != 1:
		err = errors.New("want exactly one NAME")
	default:
		if err = conn.check(); err == nil {
			err = lease.ValidateName(pos[0])
		}
	}
	if err != nil {
		return nil, "", false, usageFail(e, cmd, err)
	}
	return &conn, pos[0], *asJSON, -1
}

// election connects and returns the election; on failure, the exit code.
func election(conn *connFlags, cmd, name string, e *Env) (*lease.Election, func(), int) {
	cli, err := conn.connect(e)
	if err != nil {
		return nil, nil, fail(e, cmd, ExitConn, err)
	}
	locks, err := lease.New(cli, conn.options()...)
	if err != nil {
		cli.Close()
		return nil, nil, fail(e, cmd, ExitUsage, err)
	}
	closeAll := func() {
		locks.Close()
		cli.Close()
	}
	el, err := locks.Election(name)
	if err != nil {
		closeAll()
		return nil, nil, fail(e, cmd, exitCode(err), err)
	}
	return el, closeAll, -1
}

func cmdObserve(args []string, e *Env) int {
	conn, name, asJSON, code := electionFlags("observe", observeHelp, args, e)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	el, closeAll, code := election(conn, "observe", name, e)
	if code >= 0 {
		return code
	}
	defer closeAll()
	enc := json.NewEncoder(e.Stdout)
	for l := range el.Observe(ctx) {
		if asJSON {
			if err := enc.Encode(toLeaderJSON(name, l)); err != nil {
				return fail(e, "observe", ExitConn, err)
			}
			continue
		}
		fmt.Fprintf(e.Stdout, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), leaderText(l))
	}
	return ExitOK
}

func cmdLeader(args []string, e *Env) int {
	conn, name, asJSON, code := electionFlags("leader", leaderHelp, args, e)
	if code >= 0 {
		return code
	}
	el, closeAll, code := election(conn, "leader", name, e)
	if code >= 0 {
		return code
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), conn.commandTimeout)
	defer cancel()
	l, err := el.Leader(ctx)
	var none *lease.NoLeaderError
	switch {
	case errors.As(err, &none):
		fmt.Fprintf(e.Stderr, "fencekit leader: election %q has %s\n", name, noLeaderText(none.DelayedUntil))
		if asJSON {
			return writeJSONCode(e, "leader", toLeaderJSON(name, lease.Leader{DelayedUntil: none.DelayedUntil}), ExitRefused)
		}
		return ExitRefused
	case err != nil:
		return fail(e, "leader", exitCode(err), err)
	}
	if asJSON {
		return writeJSONCode(e, "leader", toLeaderJSON(name, l), ExitOK)
	}
	fmt.Fprintln(e.Stdout, leaderText(l))
	return ExitOK
}

// writeJSONCode writes v as JSON and returns code, or the failure's.
func writeJSONCode(e *Env, cmd string, v any, code int) int {
	if c := writeJSON(e, cmd, v); c != ExitOK {
		return c
	}
	return code
}
