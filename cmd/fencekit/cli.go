package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes. A command run by "fencekit run" that runs to completion
// passes its own exit code through (128+n when a signal n ended it).
const (
	// ExitOK is success.
	ExitOK = 0
	// ExitRefused is a "no": "release --fence N" refusing because N is
	// not the current holder (or the lock is free; nothing was deleted),
	// "leader" finding nobody leading, "verify" finding the token not
	// current, "mark show" finding no mark, "mark reset" refusing a mark
	// that is not exactly --old (nothing changed).
	ExitRefused = 1
	// ExitUsage is a usage error: an unknown flag, a bad value, a missing
	// argument, an invalid lock name, a TTL below etcd's minimum, or a lock
	// that others use as another kind of lock or a semaphore of another
	// size (lease.ErrMismatch). Nothing was done; retrying the same way
	// cannot help.
	ExitUsage = 64
	// ExitConn is a connection error: etcd could not be reached in time,
	// refused the credentials, the TLS handshake or the request (permission
	// denied), or a request's outcome is unknown. Retrying may help.
	ExitConn = 69
	// ExitSoftware is an internal error (sysexits' EX_SOFTWARE): the lease
	// package reported a state fencekit never puts it in (its Client
	// closed, a lease released under it). A bug: report it.
	ExitSoftware = 70
	// ExitServerTooOld is an etcd server older than the floor the lease
	// package supports (lease.ErrServerTooOld, sysexits' EX_PROTOCOL):
	// nothing was written, and retrying cannot help until the server is
	// upgraded.
	ExitServerTooOld = 76
	// ExitNotAcquired is "run" not getting the lock or permit: held (with
	// --try) or still held when --wait ran out; or "elect" not leading
	// when --wait ran out. The command was not started.
	ExitNotAcquired = 75
	// ExitLost is "run" or "elect" losing the lease, permit or term: the
	// command was sent SIGTERM at once and SIGKILL after --grace, or, if
	// it had already exited, the release found it lost.
	ExitLost = 79
	// ExitCannotExec is "run" or "elect" finding the command but unable to
	// start it.
	ExitCannotExec = 126
	// ExitNotFound is "run" or "elect" not finding the command.
	ExitNotFound = 127
)

// Env is what a subcommand reads and writes besides etcd: the standard
// streams and the environment.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

type command struct {
	name     string
	synopsis string // first usage line, after "fencekit "
	about    string // one line for the overview
	run      func(args []string, e *Env) int
}

// synopses are the usage lines of the subcommands, after "fencekit ".
var synopses = map[string]string{
	"run":      "run [flags] [-n N] LOCK -- COMMAND [ARGS...]",
	"status":   "status [--json] [--watch] [flags] [LOCK...]",
	"ls":       "ls [flags]",
	"release":  "release --fence N [flags] LOCK",
	"elect":    "elect [flags] NAME [VALUE] -- COMMAND [ARGS...]",
	"observe":  "observe [--json] [flags] NAME",
	"leader":   "leader [--json] [flags] NAME",
	"transfer": "transfer (--to N | --to-value V) [--fence N] [flags] NAME",
	"verify":   "verify [flags] TOKEN",
	"mark":     "mark show|reset [--dsn DSN | --etcd-prefix P] [--old T --new T] RESOURCE",
}

var commands = []command{
	{"run", synopses["run"], "run a command while holding a lock; kill it if the lease is lost", cmdRun},
	{"status", synopses["status"], "show holders and waiters of locks", cmdStatus},
	{"ls", synopses["ls"], "list the locks that are held or waited for", cmdLs},
	{"release", synopses["release"], "break-glass: delete the holder's record if its fence is N", cmdRelease},
	{"elect", synopses["elect"], "campaign; run a command while leading, kill it if the term is lost", cmdElect},
	{"observe", synopses["observe"], "print every change of an election's leader until interrupted", cmdObserve},
	{"leader", synopses["leader"], "print an election's leader (exit 1 when none)", cmdLeader},
	{"transfer", synopses["transfer"], "planned hand-off: ask an election's leader to hand its term to a chosen candidate", cmdTransfer},
	{"mark", synopses["mark"], "show a resource's mark; break-glass: reset it from exactly --old to --new", cmdMark},
	{"verify", synopses["verify"], "is TOKEN (rev:lock) the current holder's fencing token? (exit 0 yes, 1 no)", cmdVerify},
	{"shards", shardsSynopsis, "show a shard group: members, shares, shards moving or unowned", cmdShards},
}

// Main runs the fencekit command line with args (without the program name)
// and returns the exit code.
func Main(args []string, e *Env) int {
	if len(args) == 0 {
		usage(e.Stderr)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(e.Stdout)
		return ExitOK
	}
	if args[0] == watchdogCmd {
		return runWatchdog(args[1:], e)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], e)
		}
	}
	fmt.Fprintf(e.Stderr, "fencekit: unknown command %q (see 'fencekit --help')\n", args[0])
	return ExitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "fencekit holds named leases in etcd and runs commands under them.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	for _, c := range commands {
		fmt.Fprintf(w, "  fencekit %s\n      %s\n", c.synopsis, c.about)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'fencekit COMMAND --help' for a command's flags.")
	fmt.Fprintln(w, "Exit codes: 0 ok; 1 no (release, transfer or mark reset refused, no leader, token not")
	fmt.Fprintln(w, "current, no mark); 64 usage error; 69 connection error; 70 internal error;")
	fmt.Fprintln(w, "75 not acquired; 76 etcd server too old; 79 lease, permit or term lost")
	fmt.Fprintln(w, "(command killed); 126/127 command not runnable/found; otherwise (run, elect)")
	fmt.Fprintln(w, "the command's own exit code. Each command's --help lists its own.")
}

// flagSet is a subcommand's flags and help text.
type flagSet struct {
	*flag.FlagSet
	help string
}

// newFlagSet returns a flag set for the command that prints nothing by
// itself: parse reports errors in one line and help on stdout.
func newFlagSet(name, help string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, help: help}
}

// printHelp writes the command's help to w.
func printHelp(fs *flagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: fencekit %s\n\n%s\n\nFlags:\n", synopses[fs.Name()], strings.TrimSpace(fs.help))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// errHelp is returned by parse after printing help.
var errHelp = errors.New("help")

// parseOne parses flags in args up to the first argument that is not a
// flag, or up to and without "--". It returns the rest, and whether a
// "--" ended the flags.
func parseOne(fs *flagSet, args []string) (rest []string, dashdash bool, err error) {
	if len(args) > 0 && args[0] == "--" {
		return args[1:], true, nil
	}
	if err := fs.Parse(args); err != nil {
		return nil, false, err
	}
	rest = fs.Args()
	if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
		dashdash = true
	}
	return rest, dashdash, nil
}

// parse parses flags anywhere among args (until a "--") and returns the
// other arguments. On -h/--help it prints help to e.Stdout and returns
// errHelp; on a bad flag it returns the error.
func parse(fs *flagSet, args []string, e *Env) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		rest, dd, err := parseOne(fs, args)
		if err != nil {
			return nil, helpOr(fs, err, e)
		}
		if dd {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, nil
}

func helpOr(fs *flagSet, err error, e *Env) error {
	if errors.Is(err, flag.ErrHelp) {
		printHelp(fs, e.Stdout)
		return errHelp
	}
	return err
}

// usageFail reports a usage error in one line and returns ExitUsage, or
// ExitOK after help was printed.
func usageFail(e *Env, name string, err error) int {
	if errors.Is(err, errHelp) {
		return ExitOK
	}
	fmt.Fprintf(e.Stderr, "fencekit %s: %v (see 'fencekit %s --help')\n", name, err, name)
	return ExitUsage
}

// fail reports an error in one line and returns code.
func fail(e *Env, name string, code int, err error) int {
	fmt.Fprintf(e.Stderr, "fencekit %s: %s\n", name, oneLine(err.Error()))
	return code
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
