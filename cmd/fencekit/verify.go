package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

const verifyHelp = `Check whether TOKEN, a fencing token in its text form "<revision>:<lock>"
(what "fencekit run" puts in FENCING_TOKEN), is the token of its lock's
current holder, with lease's Verifier: one linearizable etcd read of the
lock's queue. The answer holds at the moment of the read: the holder may
lose the lock right after.

A token is not current when its lease has ended, when it is a waiter's, a
semaphore permit's or a read lock's revision, another lock's, or one no
acquisition made. The verdict goes to stdout in one line.

Exit codes: 0 yes, TOKEN is the current holder's; 1 no; 64 usage error
(TOKEN is not a token's text form); 69 connection error (etcd unreachable
within --dial-timeout, permission refused): no answer.`

func cmdVerify(args []string, e *Env) int {
	var conn connFlags
	fs := newFlagSet("verify", verifyHelp+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	pos, err := parse(fs, args, e)
	var tok fence.Token
	switch {
	case err != nil:
	case len(pos) != 1:
		err = errors.New("want exactly one TOKEN")
	default:
		if err = conn.check(); err == nil {
			tok, err = fence.Parse(pos[0])
		}
	}
	if err != nil {
		return usageFail(e, "verify", err)
	}
	cli, err := conn.connect(e)
	if err != nil {
		return fail(e, "verify", ExitConn, err)
	}
	defer cli.Close()
	v, err := lease.NewVerifier(cli, conn.prefix)
	if err != nil {
		return fail(e, "verify", ExitUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), conn.commandTimeout)
	defer cancel()
	err = v.Verify(ctx, tok)
	var re *fence.RefusedError
	switch {
	case err == nil:
		fmt.Fprintf(e.Stdout, "yes: %s is the token of the current holder of %q\n", tok, tok.Lock)
		return ExitOK
	case errors.As(err, &re) && re.Outcome == fence.Unverified:
		fmt.Fprintf(e.Stdout, "no: %s is not the token of the current holder of %q: %s\n", tok, tok.Lock,
			strings.TrimPrefix(re.Err.Error(), "lease: "))
		return ExitRefused
	}
	return fail(e, "verify", ExitConn, err)
}
