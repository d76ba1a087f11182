package proc_test

import (
	"syscall"
	"testing"
)

// A started process is alone in its process group: a SIGSTOP (Pause)
// cannot become a SIGHUP from the kernel when the test binary's group is
// orphaned (see sysProcAttr).
func TestOwnProcessGroup(t *testing.T) {
	p, _ := start(t, "sleep 30")
	pid := p.PID()
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid != pid {
		t.Errorf("process %d is in process group %d (this process's: %d), want a group of its own", pid, pgid, syscall.Getpgrp())
	}
}
