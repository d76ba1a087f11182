package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

const transferHelp = `Planned hand-off: ask the leader of election NAME to hand its term to a
chosen waiting candidate (lease.Election.RequestTransfer), named by the term
it would lead with (--to N, the fence "fencekit status NAME" shows for the
waiter) or by the value it published (--to-value V, refused unless exactly
one waiting candidate published V). --fence N names the leader you mean
(refused if another leads); without it, the current leader is asked.

A leader run by "fencekit elect" sends its command SIGTERM and, once the
command exits, transfers the term instead of resigning: in one etcd
transaction its record goes and the chosen candidate is admitted, with a
higher term. Candidates queued between the two queue again at the tail.
A program using lease.Election.Run transfers at once, cancelling its
function's context with lease.ErrTransferred.

Exit codes: 0 asked; 1 refused (--fence is not the leader's, nobody
leads, or the candidate is not waiting or not unique, or is no candidate:
a read lock, a set member, a lock-delay marker; nothing was asked);
64 usage error; 69 connection error or outcome unknown (running it again is
safe).`

func cmdTransfer(args []string, e *Env) int {
	var conn connFlags
	fs := newFlagSet("transfer", transferHelp+"\n\n"+connHelp)
	conn.register(fs, e.Getenv, false)
	rev := fs.Int64("fence", 0, "fencing token revision of the leader to ask (default: whoever leads)")
	to := fs.Int64("to", 0, "term (fence) of the waiting candidate to hand over to")
	toValue := fs.String("to-value", "", "the value the candidate to hand over to published")
	pos, err := parse(fs, args, e)
	var valueSet bool
	fs.Visit(func(f *flag.Flag) { valueSet = valueSet || f.Name == "to-value" })
	switch {
	case err != nil:
	case len(pos) != 1:
		err = errors.New("want exactly one NAME")
	case (*to > 0) == valueSet:
		err = errors.New("want one of --to N (N > 0) and --to-value V")
	case *rev < 0:
		err = errors.New("--fence N wants N > 0")
	default:
		if err = conn.check(); err == nil {
			err = lease.ValidateName(pos[0])
		}
	}
	if err != nil {
		return usageFail(e, "transfer", err)
	}
	name := pos[0]
	cli, err := conn.connect(e)
	if err != nil {
		return fail(e, "transfer", ExitConn, err)
	}
	defer cli.Close()
	locks, err := lease.New(cli, conn.options()...)
	if err != nil {
		return fail(e, "transfer", ExitUsage, err)
	}
	defer locks.Close()
	el, err := locks.Election(name)
	if err != nil {
		return fail(e, "transfer", ExitUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), conn.commandTimeout)
	defer cancel()
	leader, cand, err := transferParties(ctx, el, *rev, *to, *toValue, valueSet)
	if err == nil {
		err = el.RequestTransfer(ctx, leader, cand)
	}
	if err != nil {
		return transferFailed(err, name, leader, e)
	}
	fmt.Fprintf(e.Stderr, "%s fencekit transfer: asked the leader of election %q (fence %d) to hand over to fence %d\n",
		time.Now().UTC().Format(time.RFC3339), name, leader, cand.Term.Revision)
	return ExitOK
}

// transferFailed reports a transfer that was refused or failed, and
// returns the exit code.
func transferFailed(err error, name string, leader int64, e *Env) int {
	var nh *lease.NotHolderError
	var nc *lease.NotCandidateError
	switch {
	case errors.As(err, &nh) && nh.Holder == 0, errors.Is(err, lease.ErrNoLeader):
		fmt.Fprintf(e.Stderr, "fencekit transfer: refused: election %q has no leader; nothing asked\n", name)
		return ExitRefused
	case errors.As(err, &nh):
		fmt.Fprintf(e.Stderr, "fencekit transfer: refused: election %q is led by fence %d, not %d; nothing asked\n", name, nh.Holder, leader)
		return ExitRefused
	case errors.As(err, &nc), errors.Is(err, errNotUnique):
		fmt.Fprintf(e.Stderr, "fencekit transfer: refused: %v; nothing asked\n", err)
		return ExitRefused
	}
	return fail(e, "transfer", exitCode(err), err)
}

// errNotUnique reports a --to-value that no waiting candidate, or more
// than one, published.
var errNotUnique = errors.New("not exactly one waiting candidate published that value")

// transferParties finds the leader's term (rev, or the current leader's
// when 0) and the candidate: the one whose term is to, or the one waiting
// candidate that published value.
func transferParties(ctx context.Context, el *lease.Election, rev, to int64, value string, byValue bool) (int64, lease.Candidate, error) {
	if rev == 0 {
		l, err := el.Leader(ctx)
		if err != nil {
			return 0, lease.Candidate{}, err
		}
		rev = l.Term.Revision
	}
	if !byValue {
		return rev, lease.Candidate{Term: fence.Token{Lock: el.Name(), Revision: to}}, nil
	}
	cands, err := el.Candidates(ctx)
	if err != nil {
		return rev, lease.Candidate{}, err
	}
	var found []lease.Candidate
	for _, c := range cands {
		if c.Value == value {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		return rev, lease.Candidate{}, fmt.Errorf("election %q: %d waiting candidates published %q: %w", el.Name(), len(found), value, errNotUnique)
	}
	return rev, found[0], nil
}
