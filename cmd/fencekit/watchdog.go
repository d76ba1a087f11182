package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The watchdog is a second process that "fencekit run" starts next to the
// command, so that the command dies in time even when fencekit itself
// cannot act: stopped (SIGSTOP, a debugger) or killed. fencekit confirms
// the lease every quarter TTL (lease.Renew) and tells the watchdog, through
// a pipe, how long the lease is known valid from that moment: the TTL from
// when the renewal was sent, minus the safety margin. When that deadline
// passes without a new message, the watchdog sends SIGTERM to the command's
// process group and SIGKILL after the grace period; the margin covers the
// grace, so the command is dead before etcd can expire the session.
//
// Messages, one per line: "valid <milliseconds>" and "bye" (the command has
// exited or fencekit has stopped it itself: exit without killing).

const watchdogCmd = "_watchdog"

// watchdogSlack is how long after fencekit's own deadline the watchdog's
// falls: while fencekit runs, it kills the command itself and dismisses
// the watchdog first. The safety margin covers it (see runFlags.margin).
const watchdogSlack = 100 * time.Millisecond

// watchdog is a running watchdog process, seen from "fencekit run".
type watchdog struct {
	cmd  *exec.Cmd
	w    io.WriteCloser
	done bool
}

// startWatchdog starts a watchdog for the process group pgid, with the
// command's first deadline valid from now; name is the subcommand ("run"
// or "elect"), for its message.
func startWatchdog(name string, pgid int, grace, valid time.Duration, stderr io.Writer) (*watchdog, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	cmd := exec.Command(exe, watchdogCmd, strconv.Itoa(pgid), grace.String(), strconv.Itoa(os.Getpid()), name)
	cmd.Stderr = stderr
	// Its own process group: a stop or a signal meant for fencekit's group
	// does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	wd := &watchdog{cmd: cmd, w: w}
	wd.valid(valid)
	return wd, nil
}

// valid tells the watchdog the lease is valid for d from now.
func (wd *watchdog) valid(d time.Duration) {
	if wd.done {
		return
	}
	fmt.Fprintf(wd.w, "valid %d\n", d.Milliseconds())
}

// dismiss tells the watchdog to exit without killing anything: the
// command has exited, or fencekit is stopping it itself.
func (wd *watchdog) dismiss() {
	if wd.done {
		return
	}
	wd.done = true
	fmt.Fprintln(wd.w, "bye")
	wd.w.Close()
}

// stop dismisses the watchdog and waits for it to exit.
func (wd *watchdog) stop() {
	wd.dismiss()
	_ = wd.cmd.Wait()
}

// runWatchdog is the watchdog process: "fencekit _watchdog PGID GRACE
// PPID NAME".
func runWatchdog(args []string, e *Env) int {
	if len(args) != 4 {
		return ExitUsage
	}
	pgid, err1 := strconv.Atoi(args[0])
	grace, err2 := time.ParseDuration(args[1])
	if err1 != nil || err2 != nil || pgid <= 1 {
		return ExitUsage
	}
	parent, name := args[2], args[3]
	// Signals are fencekit's to forward, not the watchdog's to act on.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)

	msgs := make(chan string)
	go func() {
		sc := bufio.NewScanner(e.Stdin)
		for sc.Scan() {
			msgs <- sc.Text()
		}
		close(msgs)
	}()
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	for {
		select {
		case m, ok := <-msgs:
			switch {
			case !ok:
				// fencekit died without saying bye: keep the last
				// deadline.
				msgs = nil
			case m == "bye":
				return ExitOK
			case strings.HasPrefix(m, "valid "):
				ms, err := strconv.ParseInt(strings.TrimPrefix(m, "valid "), 10, 64)
				if err == nil {
					deadline.Reset(time.Duration(ms) * time.Millisecond)
				}
			}
		case <-deadline.C:
			killTree(parent, pgid, syscall.SIGTERM)
			fmt.Fprintf(e.Stderr, "fencekit %s (watchdog): fencekit (pid %s) confirmed no renewal in time; sent SIGTERM to the command, SIGKILL in %v\n", name, parent, grace)
			time.Sleep(grace)
			killTree(parent, pgid, syscall.SIGKILL)
			return ExitLost
		}
	}
}

// killTree sends sig to the command's process group and, on Linux, to the
// other descendants of fencekit (pid parent, when it is still there,
// stopped say) but the watchdog: those that left the group.
func killTree(parent string, pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	ppid, err := strconv.Atoi(parent)
	if err != nil || ppid <= 1 || os.Getppid() != ppid {
		return // fencekit is gone: its pid may be another process's now
	}
	pids, _ := tree(ppid, pgid, os.Getpid(), false)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}
