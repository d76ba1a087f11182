package sqlguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the sqlguard snippets of the repository's Markdown are excerpts of this
// package's Examples, so they cannot drift from code that compiles and
// whose output is checked.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckAllSnippets(t, "..", "sqlguard", "."); n < 1 {
		t.Errorf("the Markdown files have %d marked sqlguard snippets, want at least 1", n)
	}
}
