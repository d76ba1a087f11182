package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lease"
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

Exit codes: 0 deleted; 1 refused (N is not the current holder, or the lock
is free; nothing was deleted); 64 usage error; 69 connection error or
outcome unknown (running it again is safe).`

func cmdRelease(args []string, e *Env) int {
	var conn connFlags
	fs := newFlagSet("release", releaseHelp+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	rev := fs.Int64("fence", 0, "fencing token revision of the current holder (required)")
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
	locks, err := lease.New(cli, conn.options()...)
	if err != nil {
		return fail(e, "release", ExitUsage, err)
	}
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), conn.commandTimeout)
	defer cancel()
	r, err := locks.ForceRelease(ctx, name, *rev)
	var nh *lease.NotHolderError
	switch {
	case errors.As(err, &nh):
		if nh.Holder == 0 {
			fmt.Fprintf(e.Stderr, "fencekit release: refused: lock %q is free; nothing deleted\n", name)
		} else {
			fmt.Fprintf(e.Stderr, "fencekit release: refused: lock %q is held by fence %d, not %d; nothing deleted\n", name, nh.Holder, *rev)
		}
		return ExitRefused
	case err != nil:
		return fail(e, "release", exitCode(err), err)
	}
	fmt.Fprintf(e.Stderr, "%s fencekit release: deleted lock %q record %s (fence %d, owner %s on %s, holds %d); its holder's lease has ended\n",
		time.Now().UTC().Format(time.RFC3339), name, r.Key, r.Fence.Revision, r.OwnerDigest, orDash(r.Instance), r.Holds)
	return ExitOK
}
