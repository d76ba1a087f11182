package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// becomeSubreaper makes this process a child subreaper (Linux
// PR_SET_CHILD_SUBREAPER): a process the command leaves behind whose
// parent exits, a double-forked daemon included, is re-parented to
// fencekit instead of to init, so leftovers can find it.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// procInfo is what leftovers reads of a process from /proc.
type procInfo struct {
	ppid, pgid int
	zombie     bool
}

// leftovers returns the living processes of the command's tree: those in
// process group pgid, and the descendants of this process except skip
// (the watchdog) and its own; alive reports whether there are any. With
// reap (only once the command itself was waited for: it leads the group),
// zombie children of this process among them are reaped (their parents
// exited and they were re-parented here). Without /proc only the process
// group is known: pids is then nil and alive says whether the group has
// members.
func leftovers(pgid, skip int, reap bool) (pids []int, alive bool) {
	return tree(os.Getpid(), pgid, skip, reap)
}

// tree is leftovers for the descendants of self, which may be another
// process than this one (the watchdog looks at fencekit's); only this
// process's own zombie children are reaped.
func tree(self, pgid, skip int, reap bool) (pids []int, alive bool) {
	procs, ok := readProcs()
	if !ok {
		return nil, groupAlive(pgid, reap)
	}
	reap = reap && self == os.Getpid()
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	seen := map[int]bool{}
	var walk func(int)
	walk = func(parent int) {
		for _, pid := range children[parent] {
			if pid == skip || seen[pid] {
				continue
			}
			seen[pid] = true
			walk(pid)
		}
	}
	walk(self)
	for pid, p := range procs {
		if p.pgid == pgid {
			seen[pid] = true
		}
	}
	for pid := range seen {
		p := procs[pid]
		if !p.zombie {
			pids = append(pids, pid)
			continue
		}
		if reap && p.ppid == self {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
	return pids, len(pids) > 0
}

// groupAlive reports whether process group pgid still has members,
// first reaping (with reap) the zombie children of this process in it.
func groupAlive(pgid int, reap bool) bool {
	for reap {
		var ws unix.WaitStatus
		if pid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
			break
		}
	}
	return syscall.Kill(-pgid, 0) == nil
}

// readProcs reads the parent, process group and state of every process.
func readProcs() (map[int]procInfo, bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	procs := make(map[int]procInfo, len(ents))
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and ")".
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgid, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		procs[pid] = procInfo{ppid: ppid, pgid: pgid, zombie: f[0] == "Z" || f[0] == "X"}
	}
	return procs, true
}
