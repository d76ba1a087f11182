// Package testsupport holds nothing itself: its subpackages are the core
// module's test helpers, kept apart from the production helpers of
// internal/ (etcdproc, faultproxy, logattr, promreg), which library code
// and the public test-support packages of module integration import.
// Only _test.go files import these subpackages; no production package
// depends on them (TestTestSupportOnlyInTests checks it).
package testsupport
