//go:build fencekit_lockcheck

package lockorder

import (
	"strings"
	"testing"
)

// The checker itself: a lock taken against the order panics. The lease
// package's tests, built with the same tag, fail on any lock the library
// takes out of order.
func TestLockOrderCheckerCatchesAnInversion(t *testing.T) {
	var w WaiterMutex
	var recs RecordsMutex
	w.Lock()
	defer w.Unlock()
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "lock order broken") {
			t.Fatalf("recover() = %q; want a lock order panic", msg)
		}
	}()
	recs.Lock() // rank records after rank waiter: out of order
	t.Fatal("no panic")
}

// In order, nothing happens.
func TestLockOrderCheckerAcceptsTheOrder(t *testing.T) {
	var recs RecordsMutex
	var w WaiterMutex
	var s SessionMutex
	held := 0
	recs.Lock()
	w.Lock()
	s.Lock()
	held++
	s.Unlock()
	w.Unlock()
	recs.Unlock()
	if held != 1 {
		t.Fatal("the innermost section did not run")
	}
}
