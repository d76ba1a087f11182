package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// noEcho turns off echo on the terminal f and returns a function that
// restores it.
func noEcho(f *os.File) (func(), error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Lflag &^= unix.ECHO
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// foregroundTTY returns the descriptor of f when f is a terminal whose
// foreground process group is fencekit's: an interactive run. The command
// then gets the terminal (its own process group in the foreground), so it
// can read it without being stopped by SIGTTIN.
func foregroundTTY(f *os.File) (int, bool) {
	fd := int(f.Fd())
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pg != syscall.Getpgrp() {
		return 0, false
	}
	return fd, true
}

// takeBackTTY makes fencekit's process group the terminal's foreground
// group again.
func takeBackTTY(fd int) {
	signal.Ignore(syscall.SIGTTOU) // asked from the background
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp())
}
