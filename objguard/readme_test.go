package objguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the snippet of docs/object-storage.md is the
// body of this package's Example, and the code blocks of the package doc
// are excerpts of the Examples.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckAllSnippets(t, "..", "objguard", "."); n < 1 {
		t.Errorf("the Markdown files have %d marked objguard snippets, want at least 1", n)
	}
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want 1", n)
	}
}
