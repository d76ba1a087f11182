//go:build unix

package proc

import "syscall"

// The signals that pause, resume and stop a process.
var sigStop, sigCont, sigTerm = syscall.SIGSTOP, syscall.SIGCONT, syscall.SIGTERM
