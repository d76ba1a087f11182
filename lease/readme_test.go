package lease_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the README's lease snippets and the package doc's
// code block are excerpts of this package's Examples, so they cannot
// drift from code that compiles and whose output is checked.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckSnippets(t, "../README.md", "lease", "."); n < 4 {
		t.Errorf("README has %d marked lease snippets, want at least 4", n)
	}
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want at least 1", n)
	}
}
