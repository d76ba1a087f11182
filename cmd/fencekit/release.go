package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/admin"
)

const releaseHelp = `Break-glass: delete the record of the acquisition of LOCK whose fencing
token revision is N, if and only if it holds the lock now. The delete is one
etcd transaction comparing the record's creation revision, never the key
alone, so a holder that took over meanwhile is never touched. Read N from
'fencekit status LOCK'.

The holder's lease ends within milliseconds (a "fencekit run" holding it
kills its command) and the first waiter acquires. A holder that is paused
or partitioned keeps running until it notices: only fencing at the
resource stops its writes.

With --ask, delete nothing: ask the holder to release instead
(admin.Admin.RequestRelease). A "fencekit run" holding the lock sends its
command SIGTERM and releases the lock when the command exits; a program
using lease.Client.Do sees its context cancelled with
lease.ErrReleaseRequested; a holder that ignores the request keeps the
lock.

Exit codes: 0 deleted (with --ask: asked); 1 refused (N is not the current
holder, or the lock is free; nothing was deleted or asked); 64 usage error;
69 connection error or outcome unknown (running it again is safe).`

func cmdRelease(args []string, e *Env) int {
	var conn connFlags
	fs := newFlagSet("release", releaseHelp+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	rev := fs.Int64("fence", 0, "fencing token revision of the current holder (required)")
	ask := fs.Bool("ask", false, "ask the holder to release instead of deleting its record")
	pos, err := parse(fs, args, e)
	switch {
	case err != nil:
	case len(pos) != 1:
		err = errors.New("want exactly one LOCK")
	case *rev <= 0:
		err = errors.New("--fence N is required, N > 0")
	default:
		if err = conn.check(); err == nil {
			err = lease.ValidateName(pos[0])
		}
	}
	if err != nil {
		return usageFail(e, "release", err)
	}
	name := pos[0]
	cli, err := conn.connect(e)
	if err != nil {
		return fail(e, "release", ExitConn, err)
	}
	defer cli.Close()
	ops, err := admin.New(cli, conn.prefix)
	if err != nil {
		return fail(e, "release", ExitUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), conn.commandTimeout)
	defer cancel()
	if *ask {
		err := ops.RequestRelease(ctx, name, *rev)
		if code, done := refused(err, name, *rev, "nothing asked", e); done {
			return code
		}
		fmt.Fprintf(e.Stderr, "%s fencekit release: asked the holder of lock %q (fence %d) to release it\n",
			time.Now().UTC().Format(time.RFC3339), name, *rev)
		return ExitOK
	}
	r, err := ops.ForceRelease(ctx, name, *rev)
	if code, done := refused(err, name, *rev, "nothing deleted", e); done {
		return code
	}
	fmt.Fprintf(e.Stderr, "%s fencekit release: deleted lock %q record %s (fence %d, owner %s on %s, holds %d); its holder's lease has ended\n",
		time.Now().UTC().Format(time.RFC3339), name, r.Key, r.Fence.Revision, r.OwnerDigest, orDash(r.Instance), r.Holds)
	return ExitOK
}

// refused reports a failed release or request to release: the exit code,
// and whether err was one.
func refused(err error, name string, rev int64, nothing string, e *Env) (int, bool) {
	var nh *lease.NotHolderError
	switch {
	case errors.As(err, &nh) && nh.Holder == 0:
		fmt.Fprintf(e.Stderr, "fencekit release: refused: lock %q is free; %s\n", name, nothing)
		return ExitRefused, true
	case errors.As(err, &nh):
		fmt.Fprintf(e.Stderr, "fencekit release: refused: lock %q is held by fence %d, not %d; %s\n", name, nh.Holder, rev, nothing)
		return ExitRefused, true
	case err != nil:
		return fail(e, "release", exitCode(err), err), true
	}
	return 0, false
}
