//go:build unix

package etcdproc

import "syscall"

// The signals that pause and resume a member.
var sigStop, sigCont, sigTerm = syscall.SIGSTOP, syscall.SIGCONT, syscall.SIGTERM
