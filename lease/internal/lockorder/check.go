//go:build fencekit_lockcheck

package lockorder

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
)

// With the fencekit_lockcheck tag, every lock of the package records, per
// goroutine, the ranks it holds, and a Lock of a rank not above all of
// them panics: a build of the tests with the tag fails on the first lock
// taken out of order (go test -tags fencekit_lockcheck ./lease).
var lockCheck struct {
	mu   sync.Mutex
	held map[uint64][]lockRank // goroutine id -> ranks held, in the order taken
}

func acquiring(r lockRank) {
	id := goroutineID()
	lockCheck.mu.Lock()
	defer lockCheck.mu.Unlock()
	for _, h := range lockCheck.held[id] {
		if h >= r {
			panic(fmt.Sprintf("lease: lock order broken: taking rank %d while holding rank %d (see Concurrency in doc.go)", r, h))
		}
	}
	if lockCheck.held == nil {
		lockCheck.held = map[uint64][]lockRank{}
	}
	lockCheck.held[id] = append(lockCheck.held[id], r)
}

func released(r lockRank) {
	id := goroutineID()
	lockCheck.mu.Lock()
	defer lockCheck.mu.Unlock()
	hs := lockCheck.held[id]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i] == r {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(lockCheck.held, id)
		return
	}
	lockCheck.held[id] = hs
}

// goroutineID parses the current goroutine's id from its stack header,
// "goroutine 42 [running]:".
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	b = b[:bytes.IndexByte(b, ' ')]
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("lease: lockcheck: " + err.Error())
	}
	return id
}
