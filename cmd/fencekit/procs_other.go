//go:build !linux

package main

import "syscall"

// becomeSubreaper does nothing: child subreapers are Linux-only, and
// elsewhere a process that leaves the command's process group (setsid)
// cannot be found.
func becomeSubreaper() error { return nil }

// leftovers reports whether anything of process group pgid still runs,
// first reaping (with reap, once the command itself was waited for) the
// zombie children of this process in it; elsewhere than Linux the
// processes are not listed, and those that left the group are not seen.
func leftovers(pgid, _ int, reap bool) (pids []int, alive bool) {
	for reap {
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
			break
		}
	}
	return nil, syscall.Kill(-pgid, 0) == nil
}

// tree is leftovers; the descendants of self are not seen.
func tree(_, pgid, skip int, reap bool) (pids []int, alive bool) { return leftovers(pgid, skip, reap) }
