//go:build !linux

package etcdproc

import "syscall"

// sysProcAttr is the default here: only Linux kills children when their
// parent dies; members are stopped by Close or the test's cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func lockThread() {}
