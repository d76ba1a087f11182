package sqlguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the README's sqlguard snippets are excerpts of this
// package's Examples, so they cannot drift from code that compiles and
// whose output is checked.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckSnippets(t, "../README.md", "sqlguard", "."); n < 1 {
		t.Errorf("README has %d marked sqlguard snippets, want at least 1", n)
	}
}
