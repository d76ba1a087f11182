package etcdproc

import (
	"runtime"
	"syscall"
)

// sysProcAttr makes the kernel kill a member when the thread that started
// it exits: the test process ending in any way (a timeout panic, a signal)
// leaves no etcd behind. start runs on a locked thread that lives as long
// as the member.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// lockThread keeps the calling goroutine on its thread; see sysProcAttr.
func lockThread() { runtime.LockOSThread() }
