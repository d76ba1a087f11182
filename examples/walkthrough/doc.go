// Package walkthrough is a module of its own that tests a critical section
// the way a user of fencekit would: it imports the project only through its
// public packages (integration/etcdtest, integration/faults,
// integration/check, lease, guard, fence), so `go test` here proves that a
// user's module can run the walkthrough. Its test file holds the
// walkthrough, an Example shown in docs/testing.md's "Testing your own
// critical section", and a test here checks that it shows it as it runs.
package walkthrough
