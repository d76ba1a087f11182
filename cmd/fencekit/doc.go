// Command fencekit runs commands under named leases (distributed locks) in
// etcd, shows who holds and waits for which lock, and gives operators a
// break-glass release.
//
//	go install github.com/fencekit/fencekit/cmd/fencekit@latest
//
// Subcommands:
//
//	fencekit run [--wait D | --try] [--grace D] [-n N] LOCK -- COMMAND [ARGS...]
//	fencekit status [--json] [--watch] [LOCK...]
//	fencekit ls [--json]
//	fencekit release --fence N LOCK
//	fencekit elect [--wait D] [--grace D] NAME [VALUE] -- COMMAND [ARGS...]
//	fencekit observe [--json] NAME
//	fencekit leader [--json] NAME
//	fencekit transfer (--to N | --to-value V) [--fence N] NAME
//	fencekit verify TOKEN
//	fencekit shards [--json] [--all] [--group-prefix P] GROUP
//	fencekit mark show [--dsn DSN | --etcd-prefix P] RESOURCE
//	fencekit mark reset --old REV:LOCK --new REV:LOCK [--dsn DSN | --etcd-prefix P] RESOURCE
//
// Connection flags follow etcdctl: --endpoints, --cacert, --cert, --key,
// --user (NAME or NAME:PASSWORD), --password, --dial-timeout,
// --command-timeout, with the ETCDCTL_* environment variables as defaults;
// plus --prefix (default "fencekit/locks/", env FENCEKIT_PREFIX) and --ttl
// (default 10s, env FENCEKIT_TTL). Flags go after the subcommand.
//
// # run
//
// run acquires LOCK (waiting in FIFO order, printing the time waited and
// the queue position every --progress), then runs COMMAND in its own process
// group with FENCING_TOKEN=<revision>:<lock> (package fence's text form:
// send it as guard's Fencing-Token header or to sqlguard) and
// FENCEKIT_LOCK=<lock> in its environment. SIGINT, SIGTERM and SIGHUP are
// forwarded to the group. When the lease is lost, the group gets SIGTERM at
// once and SIGKILL after --grace, and the cause is printed; run widens the
// lease's safety margin to --grace plus 250 ms, so that when renewals stop
// (a partition, a paused etcd) the command is dead before etcd can expire
// the session and let another holder in. A record deleted by an operator or
// a revoked session hands the lock over at once: the command is killed
// within milliseconds, but the next holder may already have started, which
// is why writes must carry FENCING_TOKEN to a resource that checks it.
// When the command exits, run stops whatever it left running before it
// releases the lease: the rest of its process group (a background child)
// and, on Linux, every descendant that left the group (setsid, a
// double-forked daemon): run makes itself a child subreaper
// (PR_SET_CHILD_SUBREAPER), so the command's orphans re-parent to it,
// not to init, and it finds them in /proc. They get SIGTERM at once and
// SIGKILL after --grace; the lease is held and renewed until they are
// gone, and run says so on stderr; the exit code stays the command's. A
// command that wants background work done under the lock must wait for it.
// What this cannot catch without cgroups: work handed to another process
// (systemd-run, at, a container runtime, ssh), descendants of a run that
// was itself killed (its watchdog kills the process group, and while run
// is stopped rather than dead, its other descendants too), and, off
// Linux, processes that left the process group. Then run releases the
// lease and checks the result.
//
// With -n N, run holds one of N permits of a semaphore called LOCK
// (lease.Client.Semaphore: at most N runs at once, FIFO) instead of the
// lock. A permit has no fencing token, so FENCING_TOKEN is not set;
// FENCEKIT_PERMIT_REVISION (the permit record's creation revision, not a
// fencing token) and FENCEKIT_PERMITS (N) are, with FENCEKIT_LOCK.
//
// run confirms the lease every quarter TTL and keeps a deadline (the TTL
// from when the last confirmed renewal was sent, minus the safety margin);
// a watchdog process it starts next to the command holds the same deadline,
// so the command is killed in time even while fencekit itself is stopped
// (SIGSTOP, a debugger) or after it was killed. A machine that freezes as a
// whole freezes the watchdog too: fencing at the resource covers that case.
//
// # Exit codes
//
//	0..255  run, elect: the command's own exit code (128+N when signal N
//	        ended it)
//	0       the other commands: done (verify: yes; observe and
//	        status --watch: interrupted)
//	1       a "no": release, transfer or mark reset refused (nothing
//	        deleted, asked or changed); leader: nobody leads; verify: the token is not
//	        current; mark show: no mark
//	64      usage error (bad flag, argument, lock name or TTL, or a lock
//	        that others use as another kind of lock or a semaphore of
//	        another size); nothing done, retrying the same way cannot help
//	69      connection error: etcd (or, for mark, the database)
//	        unreachable within --dial-timeout, TLS, authentication or
//	        permission refused, or an outcome unknown; retrying may help
//	70      internal error: the lease library reported a state fencekit
//	        never puts it in (a bug: report it)
//	75      run, elect: not acquired (held by anything, with --try; or
//	        --wait ran out)
//	76      the etcd server is older than the supported floor
//	79      run, elect: lease, permit or term lost; the command was killed
//	        (or had exited and the release found it lost)
//	126     run, elect: the command could not be started
//	127     run, elect: the command was not found
//
// A command whose own exit code is one of these makes them ambiguous; check
// stderr, where fencekit says why it exits.
//
// # status and ls
//
// status prints, per lock, the holder and the waiters in order: fencing
// token, owner digest (never the owner token), instance id, a lower bound
// on when the record was written (the owner process's start, carried by its
// owner token; etcd stores no times), hold count and session TTL left. ls
// prints one line per lock. Both take --json. status --watch prints again
// at every change until interrupted: redrawn on a terminal, appended
// otherwise.
//
// # release
//
// release --fence N LOCK deletes the holder's record in one etcd
// transaction comparing its creation revision with N, and refuses when N is
// not the current holder.
//
// # elect, observe and leader
//
// elect campaigns in election NAME (lease.Client.Election), publishing
// VALUE, and runs COMMAND while it leads, as run does (killed when the term
// is lost, exit 79), with the term's FENCING_TOKEN and FENCEKIT_ELECTION;
// it resigns when the command exits. observe prints the leader and every
// change of it until interrupted (exit 0); leader prints the current one,
// or exits 1 when nobody leads, saying "no leader, lock-delay until ~T"
// while a vanished leader's lock-delay runs (as observe does). transfer asks the leader to hand its term
// to a waiting candidate, named by its fence (--to) or by the value it
// published (--to-value, refused unless unique): the leader's elect sends
// its command SIGTERM and, once it exits, transfers the term
// (lease.Term.Transfer) instead of resigning.
//
// # verify
//
// verify TOKEN checks with lease's Verifier whether TOKEN ("<rev>:<lock>")
// is the fencing token of its lock's current holder: exit 0 yes, 1 no, 69
// when etcd cannot answer, 64 when TOKEN is not a token's text form.
//
// # mark
//
// mark show prints a fenced resource's mark, from sqlguard's fence table
// (--dsn postgres://..., mysql://... or sqlite://PATH) or guard/etcdstore's
// keys (--etcd-prefix); mark reset sets it from exactly --old to --new (of
// the same lock) in one compare-and-set, and refuses otherwise (exit 1,
// nothing changed). The build tags fencekit_nopostgres, fencekit_nomysql
// and fencekit_nosqlite leave a database driver out.
//
// # A development etcd
//
// fencekit links etcd's client only. For local development and demos, the
// integration module has a single-member etcd in one process:
//
//	go run ./integration/cmd/fencekit-dev-etcd --data-dir /tmp/fk.etcd &  # in a checkout
package main
