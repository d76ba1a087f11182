//go:build fencekit_lockcheck

package lease

import (
	"strings"
	"testing"
)

// The checker itself: a lock taken against the order panics. The rest of
// the package's tests, built with the same tag, fail on any lock the
// library takes out of order.
func TestLockOrderCheckerCatchesAnInversion(t *testing.T) {
	var w waiter
	var recs records
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "lock order broken") {
			t.Fatalf("recover() = %q; want a lock order panic", msg)
		}
	}()
	recs.mu.Lock() // rank records after rank waiter: out of order
	t.Fatal("no panic")
}

// In order, nothing happens.
func TestLockOrderCheckerAcceptsTheOrder(t *testing.T) {
	var recs records
	var w waiter
	var s session
	recs.mu.Lock()
	w.mu.Lock()
	s.mu.Lock()
	s.uncertain++
	s.mu.Unlock()
	w.mu.Unlock()
	recs.mu.Unlock()
}
