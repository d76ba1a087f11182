package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/admin"
)

const statusHelp = `Show each lock's holder and its waiters in the order they will be served.
Without LOCK arguments, every lock that is held or waited for.

For the holder and each waiter: the fencing token, the owner digest (never
the owner token), the instance id, "since" (a lower bound on when the record
was written: the owner process's start time, which its owner token carries;
etcd stores no times), the hold count, and the session TTL left. A lock
whose holder vanished without releasing, and that was acquired with a
lock-delay ("run --lock-delay"), shows "lock-delay until ~T" (about when
the next holder may start; JSON: delayed_until) and no holder meanwhile.

With --watch, status follows the locks through one etcd watch of the
prefix and prints them again at every change until SIGINT or SIGTERM
(exit 0): on a terminal it redraws the screen; otherwise it appends a line
"== <time> revision <N>" and the table (with --json, one JSON array per
line). The TTL column is as of the change, not counted down.

Exit codes: 0 printed (or, with --watch, interrupted); 64 usage error; 69
connection error (etcd unreachable within --dial-timeout at the start;
later, the watch retries); 76 etcd server older than the supported floor.`

const lsHelp = `List the locks that are held or waited for, one line each: holder's fence,
owner digest, hold count, session TTL left and the number of waiters.

Exit codes: 0 printed; 64 usage error; 69 connection error; 76 etcd server
older than the supported floor.`

// recordJSON is a lock record in "status --json" output.
type recordJSON struct {
	Fence        int64     `json:"fence"`
	FencingToken string    `json:"fencing_token"`
	Owner        string    `json:"owner"`
	Instance     string    `json:"instance"`
	Since        time.Time `json:"since,omitzero"`
	Holds        int       `json:"holds"`
	Session      string    `json:"session"`
	SessionTTL   float64   `json:"session_ttl_seconds"`
	Key          string    `json:"key"`
	Kind         string    `json:"kind,omitempty"`
	Held         bool      `json:"held"`
	Value        string    `json:"value,omitempty"`
	LockDelay    float64   `json:"lock_delay_seconds,omitempty"`
}

// lockJSON is one lock in "status --json" output.
type lockJSON struct {
	Lock     string       `json:"lock"`
	Revision int64        `json:"revision"`
	Holder   *recordJSON  `json:"holder"`
	Waiters  []recordJSON `json:"waiters"`
	// DelayedUntil is set while the lock waits out a lock-delay.
	DelayedUntil *time.Time `json:"delayed_until,omitempty"`
}

// lsJSON is one lock in "ls --json" output.
type lsJSON struct {
	Lock         string  `json:"lock"`
	Fence        int64   `json:"fence"`
	FencingToken string  `json:"fencing_token"`
	Owner        string  `json:"owner"`
	Holds        int     `json:"holds"`
	SessionTTL   float64 `json:"session_ttl_seconds"`
	Waiters      int     `json:"waiters"`
}

func toRecordJSON(r admin.Record) recordJSON {
	return recordJSON{
		Fence:        r.Fence.Revision,
		FencingToken: r.Fence.String(),
		Owner:        r.OwnerDigest,
		Instance:     r.Instance,
		Since:        r.Since,
		Holds:        r.Holds,
		Session:      strconv.FormatInt(r.Session, 16),
		SessionTTL:   r.SessionTTL.Seconds(),
		Key:          r.Key,
		Kind:         r.Kind,
		Held:         r.Held,
		Value:        r.Value,
		LockDelay:    r.LockDelay.Seconds(),
	}
}

func toLockJSON(st admin.LockState) lockJSON {
	out := lockJSON{Lock: st.Name, Revision: st.Revision, Waiters: []recordJSON{}}
	if !st.DelayedUntil.IsZero() {
		out.DelayedUntil = &st.DelayedUntil
	}
	if st.Holder != nil {
		h := toRecordJSON(*st.Holder)
		out.Holder = &h
	}
	for _, w := range st.Waiters {
		out.Waiters = append(out.Waiters, toRecordJSON(w))
	}
	return out
}

func cmdStatus(args []string, e *Env) int {
	var conn connFlags
	fs := newFlagSet("status", statusHelp+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	asJSON := fs.Bool("json", false, "print JSON: an array of {lock, revision, holder, waiters}")
	watch := fs.Bool("watch", false, "print again at every change until interrupted: redrawn on a terminal, appended otherwise (with --json, one array per line)")
	names, err := parse(fs, args, e)
	if err == nil {
		err = conn.check()
	}
	for _, n := range names {
		if err == nil {
			err = lease.ValidateName(n)
		}
	}
	if err != nil {
		return usageFail(e, "status", err)
	}
	if *watch {
		return watchStatus(&conn, names, *asJSON, e)
	}
	states, code := inspect(&conn, names, e, "status")
	if code >= 0 {
		return code
	}
	if *asJSON {
		out := make([]lockJSON, 0, len(states))
		for _, st := range states {
			out = append(out, toLockJSON(st))
		}
		return writeJSON(e, "status", out)
	}
	writeStatus(e.Stdout, states)
	return ExitOK
}

func cmdLs(args []string, e *Env) int {
	var conn connFlags
	fs := newFlagSet("ls", lsHelp+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	asJSON := fs.Bool("json", false, "print JSON: an array of {lock, fence, fencing_token, owner, holds, session_ttl_seconds, waiters}")
	pos, err := parse(fs, args, e)
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q", pos[0])
	}
	if err == nil {
		err = conn.check()
	}
	if err != nil {
		return usageFail(e, "ls", err)
	}
	states, code := inspect(&conn, nil, e, "ls")
	if code >= 0 {
		return code
	}
	if *asJSON {
		out := make([]lsJSON, 0, len(states))
		for _, st := range states {
			j := lsJSON{Lock: st.Name, Waiters: len(st.Waiters)}
			if h := st.Holder; h != nil {
				j.Fence, j.FencingToken, j.Owner, j.Holds, j.SessionTTL = h.Fence.Revision, h.Fence.String(), h.OwnerDigest, h.Holds, h.SessionTTL.Seconds()
			}
			out = append(out, j)
		}
		return writeJSON(e, "ls", out)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tFENCE\tOWNER\tINSTANCE\tHOLDS\tTTL\tWAITERS")
	for _, st := range states {
		h := st.Holder
		if h == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%d\n", st.Name, len(st.Waiters))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%d\n", st.Name, h.Fence.Revision, h.OwnerDigest, orDash(h.Instance), h.Holds, ttlText(h.SessionTTL), len(st.Waiters))
	}
	tw.Flush()
	return ExitOK
}

// inspect reads the named locks (all when names is empty). It returns the
// states and -1, or on failure the exit code.
func inspect(conn *connFlags, names []string, e *Env, cmd string) ([]admin.LockState, int) {
	cli, err := conn.connect(e)
	if err != nil {
		return nil, fail(e, cmd, ExitConn, err)
	}
	defer cli.Close()
	ops, err := admin.New(cli, conn.prefix)
	if err != nil {
		return nil, fail(e, cmd, ExitUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), conn.commandTimeout)
	defer cancel()
	if len(names) == 0 {
		states, err := ops.InspectAll(ctx)
		if err != nil {
			return nil, fail(e, cmd, exitCode(err), err)
		}
		return states, -1
	}
	states := make([]admin.LockState, 0, len(names))
	for _, n := range names {
		st, err := ops.Inspect(ctx, n)
		if err != nil {
			return nil, fail(e, cmd, exitCode(err), err)
		}
		states = append(states, *st)
	}
	return states, -1
}

func writeJSON(e *Env, cmd string, v any) int {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(e, cmd, ExitConn, err)
	}
	return ExitOK
}

func ttlText(d time.Duration) string {
	if d < 0 {
		return "gone"
	}
	return d.String()
}

func writeStatus(w io.Writer, states []admin.LockState) {
	if len(states) == 0 {
		fmt.Fprintln(w, "no lock is held or waited for")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tROLE\tFENCE\tOWNER\tINSTANCE\tSINCE>=\tHOLDS\tTTL\tNOTE")
	for _, st := range states {
		switch {
		case st.Holder == nil && !st.DelayedUntil.IsZero():
			// A holder vanished without releasing: nobody holds the lock
			// until its lock-delay ends.
			fmt.Fprintf(tw, "%s\tlock-delay until ~%s\t-\t-\t-\t-\t-\t-\t-\n", st.Name, st.DelayedUntil.UTC().Format(time.RFC3339))
		case st.Holder == nil:
			fmt.Fprintf(tw, "%s\tfree\t-\t-\t-\t-\t-\t-\t-\n", st.Name)
		}
		row := func(role string, r admin.Record) {
			since := "-"
			if !r.Since.IsZero() {
				since = r.Since.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", st.Name, role, r.Fence.Revision, r.OwnerDigest, orDash(r.Instance), since, r.Holds, ttlText(r.SessionTTL), noteText(r.Value))
		}
		if st.Holder != nil {
			row("holder", *st.Holder)
		}
		for i, r := range st.Waiters {
			row(fmt.Sprintf("waiter %d", i+1), r)
		}
	}
	tw.Flush()
}

// noteText shows a record's note (an election candidate's value or an
// acquisition's metadata) quoted, since anyone who may write the prefix
// writes it, or "-".
func noteText(v string) string {
	if v == "" {
		return "-"
	}
	return strconv.Quote(v)
}
