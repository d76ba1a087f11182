package lease_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the lease snippets of the repository's Markdown
// (README.md, docs/) and the package doc's code block are excerpts of
// this package's Examples, so they cannot drift from code that compiles
// and whose output is checked.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckAllSnippets(t, "..", "lease", "."); n < 4 {
		t.Errorf("the Markdown files have %d marked lease snippets, want at least 4", n)
	}
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want at least 1", n)
	}
}
