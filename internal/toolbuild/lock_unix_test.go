//go:build unix

package toolbuild_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/toolbuild"
)

// A second holder of the lock waits until the first lets go.
func TestLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "build.lock")
	unlock, err := toolbuild.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		u, err := toolbuild.Lock(path)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		u()
	}()
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	unlock()
	if at := <-got; at.Before(released) {
		t.Errorf("the second Lock returned at %v, before the first was released at %v", at, released)
	}
}
