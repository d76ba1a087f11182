//go:build !fencekit_lockcheck

package lease

// acquiring and released check the lock order only in builds with the
// fencekit_lockcheck tag (see lockcheck.go).
func acquiring(lockRank) {}
func released(lockRank)  {}
