package objguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the root README's object storage snippet is the
// body of this package's Example, and the code blocks of the package doc
// are excerpts of the Examples.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckSnippets(t, "../README.md", "objguard", "."); n < 1 {
		t.Errorf("the root README has %d marked objguard snippets, want at least 1", n)
	}
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want 1", n)
	}
}
