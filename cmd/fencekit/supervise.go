package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// supervise runs the command while h is held and returns its exit code,
// or lost after killing it when h is lost (or could not be confirmed in
// time).
//
// Besides watching h.Done, it confirms the lease (h.Renew) every quarter
// TTL and keeps h's validity deadline (h.ValidUntil: the TTL from when the
// last confirmed renewal was sent, minus the safety margin), read after
// each confirmed renewal. A watchdog process (see watchdog.go) holds the
// same deadline, so the command is killed in time even if this process is
// stopped or killed; this process kills it at the deadline too.
//
// It is a small state machine: a supervisor, whose state only its event
// handlers change, one per event (see step).
func (f *runFlags) supervise(h *holding, cmdline []string, sigc <-chan os.Signal, e *Env) (code int, lost bool) {
	s := &supervisor{f: f, h: h, e: e, skip: -1, every: roundTTL(f.conn.ttl) / 4}
	if code, lost, ok := s.confirm(); !ok {
		return code, lost
	}
	defer s.stop()
	if code, ok := s.start(cmdline); !ok {
		return code, false
	}
	for !s.step(sigc) {
	}
	return s.finish()
}

// supervisor is the state of one supervise: the command, the lease's
// deadline, and which of the events it waits for are armed (a nil channel
// is not).
type supervisor struct {
	f     *runFlags
	h     *holding
	e     *Env
	every time.Duration // how often to confirm the lease, and the bound of each Renew

	cmd  *exec.Cmd
	pgid int       // the command's process group
	skip int       // the watchdog's pid, not the command's (-1: no watchdog)
	wd   *watchdog // nil when it could not start
	undo []func()  // run by stop, last first

	deadline  time.Time    // h.ValidUntil as last read
	own       *time.Timer  // fires at deadline
	renewTick *time.Ticker // every quarter TTL
	renewed   chan error   // the result of the Renew in flight
	renewing  bool

	exited  <-chan error     // the command's exit; nil once it came
	waitErr error            // the command's Wait error, once exited
	done    <-chan struct{}  // h.Done(); nil once the loss is handled
	asked   <-chan struct{}  // h.ReleaseRequested(); nil once heard
	leftc   <-chan time.Time // while what the command left is stopped
	killc   <-chan time.Time // SIGKILL when it fires (--grace after SIGTERM)
	lost    bool
}

// confirm renews h once before the command starts, and reads its
// deadline. When it cannot, it reports !ok with the exit code.
func (s *supervisor) confirm() (code int, lost, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.every)
	err := s.h.Renew(ctx)
	cancel()
	s.deadline = s.h.ValidUntil()
	if err == nil && !s.deadline.IsZero() {
		return 0, false, true
	}
	if herr := s.h.Err(); herr != nil {
		fmt.Fprintf(s.e.Stderr, "fencekit %s: %s on %q lost before the command started: %s\n", s.f.cmd, s.h.what, s.h.name, lossCause(herr))
		return ExitLost, true, false
	}
	return fail(s.e, s.f.cmd, ExitConn, err), false, false
}

// start starts the command, the watchdog, the renewal ticker and the
// deadline timer. When the command cannot start it reports !ok with the
// exit code.
func (s *supervisor) start(cmdline []string) (code int, ok bool) {
	if err := becomeSubreaper(); err != nil {
		fmt.Fprintf(s.e.Stderr, "fencekit %s: warning: %s: processes that leave the command's process group will not be found\n", s.f.cmd, oneLine(err.Error()))
	}
	cmd := s.command(cmdline)
	if err := cmd.Start(); err != nil {
		code := ExitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return fail(s.e, s.f.cmd, code, err), false
	}
	s.cmd, s.pgid = cmd, cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.exited, s.done, s.asked = exited, s.h.Done(), s.h.ReleaseRequested()
	wd, err := startWatchdog(s.f.cmd, s.pgid, s.f.grace, time.Until(s.deadline)+watchdogSlack, s.e.Stderr)
	if err != nil {
		fmt.Fprintf(s.e.Stderr, "fencekit %s: warning: %s: the command is not protected against fencekit itself being stopped\n", s.f.cmd, oneLine(err.Error()))
	} else {
		s.wd, s.skip = wd, wd.cmd.Process.Pid
		s.undo = append(s.undo, wd.stop)
	}
	s.renewed = make(chan error, 1)
	s.renewTick = time.NewTicker(s.every)
	s.own = time.NewTimer(time.Until(s.deadline))
	s.undo = append(s.undo, s.renewTick.Stop, func() { s.own.Stop() })
	return 0, true
}

// command is the command to run: in its own process group, in the
// terminal's foreground when fencekit has it, with h's variables.
func (s *supervisor) command(cmdline []string) *exec.Cmd {
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.e.Stdin, s.e.Stdout, s.e.Stderr
	cmd.Env = append(withoutVars(os.Environ(), envVars...), s.h.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if in, ok := s.e.Stdin.(*os.File); ok {
		if fd, ok := foregroundTTY(in); ok {
			cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, fd
			s.undo = append(s.undo, func() { takeBackTTY(fd) })
		}
	}
	return cmd
}

// stop undoes what start did: timers, watchdog, terminal.
func (s *supervisor) stop() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}

// step waits for the next event and hands it to its handler; it reports
// whether supervising is over.
func (s *supervisor) step(sigc <-chan os.Signal) (over bool) {
	select {
	case err := <-s.exited:
		return s.onExit(err)
	case <-s.leftc:
		return s.onLeftoverTick()
	case sig := <-sigc:
		s.onSignal(sig)
	case <-s.asked:
		s.onAsked()
	case <-s.done:
		s.onLoss(lossCause(s.h.Err()))
	case <-s.own.C:
		s.onLoss("no renewal confirmed before the validity deadline " + s.deadline.Format("15:04:05.000"))
	case <-s.killc:
		s.onKillTimer()
	case <-s.renewTick.C:
		s.onRenewTick()
	case err := <-s.renewed:
		s.onRenewed(err)
	}
	return false
}

// onExit handles the command's exit. Supervising is over unless the lease
// holds and the command left processes running: those get SIGTERM now
// (see stopLeftovers), SIGKILL after --grace, and the lease is held until
// they are gone.
func (s *supervisor) onExit(err error) (over bool) {
	s.waitErr, s.exited = err, nil
	if s.lost || !s.f.stopLeftovers(s.pgid, s.skip, waitCode(err, s.cmd.ProcessState), s.e) {
		return true
	}
	left := time.NewTicker(20 * time.Millisecond)
	s.undo = append(s.undo, left.Stop)
	s.leftc = left.C
	s.killc = time.NewTimer(s.f.grace).C
	return false
}

// onLeftoverTick checks whether what the command left is gone yet.
func (s *supervisor) onLeftoverTick() (over bool) {
	_, alive := leftovers(s.pgid, s.skip, true)
	return !alive
}

// onSignal forwards a signal fencekit got to the command's tree.
func (s *supervisor) onSignal(sig os.Signal) {
	signalTree(s.pgid, s.skip, sig.(syscall.Signal))
}

// onAsked handles a request to release: the command gets SIGTERM, and the
// lock is released once it exits.
func (s *supervisor) onAsked() {
	s.asked = nil
	signalTree(s.pgid, s.skip, syscall.SIGTERM)
	fmt.Fprintf(s.e.Stderr, "fencekit %s: asked to release %q (fencekit release --ask, or transfer); sent SIGTERM to the command, releasing when it exits\n", s.f.cmd, s.h.name)
}

// onLoss handles the loss of the lease, or its deadline passing without a
// confirmed renewal, once: this process takes the killing over from the
// watchdog, sends SIGTERM now and arms SIGKILL after --grace.
func (s *supervisor) onLoss(cause string) {
	if s.lost {
		return
	}
	s.lost, s.done = true, nil
	if s.wd != nil {
		s.wd.dismiss()
	}
	signalTree(s.pgid, s.skip, syscall.SIGTERM)
	fmt.Fprintf(s.e.Stderr, "fencekit %s: %s on %q lost: %s; sent SIGTERM to the command, SIGKILL in %v\n", s.f.cmd, s.h.what, s.h.name, cause, s.f.grace)
	s.killc = time.NewTimer(s.f.grace).C
}

// onKillTimer sends SIGKILL once --grace has passed after SIGTERM.
func (s *supervisor) onKillTimer() {
	signalTree(s.pgid, s.skip, syscall.SIGKILL)
	s.killc = nil
}

// onRenewTick starts a Renew unless one is in flight or the lease is
// lost.
func (s *supervisor) onRenewTick() {
	if s.renewing || s.lost {
		return
	}
	s.renewing = true
	h, every, renewed := s.h, s.every, s.renewed
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		defer cancel()
		renewed <- h.Renew(ctx)
	}()
}

// onRenewed handles a Renew's result: a confirmed one moves the deadline
// to h.ValidUntil, here and in the watchdog. A failed one changes nothing:
// a loss shows through Done, and otherwise the deadline stands.
func (s *supervisor) onRenewed(err error) {
	s.renewing = false
	if err != nil || s.lost {
		return
	}
	until := s.h.ValidUntil()
	if until.IsZero() {
		return // ended meanwhile: Done says why
	}
	s.deadline = until
	s.own.Reset(time.Until(until))
	if s.wd != nil {
		s.wd.valid(time.Until(until) + watchdogSlack)
	}
}

// finish returns supervise's result once the loop is over: lost, or the
// command's exit code, which counts only if the lease held until the
// command exited (the exit and the loss can arrive together, after a stop
// say).
func (s *supervisor) finish() (code int, lost bool) {
	if s.renewing {
		<-s.renewed
	}
	if s.lost {
		// Whatever the command left goes too.
		signalTree(s.pgid, s.skip, syscall.SIGKILL)
		return ExitLost, true
	}
	code = waitCode(s.waitErr, s.cmd.ProcessState)
	if err := s.h.Err(); err != nil {
		fmt.Fprintf(s.e.Stderr, "fencekit %s: the command exited with code %d, but the %s on %q was lost: %s\n", s.f.cmd, code, s.h.what, s.h.name, lossCause(err))
		return code, true
	}
	if time.Now().After(s.deadline) {
		fmt.Fprintf(s.e.Stderr, "fencekit %s: the command exited with code %d, but no renewal of the %s on %q was confirmed before its validity deadline %s\n",
			s.f.cmd, code, s.h.what, s.h.name, s.deadline.Format("15:04:05.000"))
		return code, true
	}
	return code, false
}
