package redisguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the redisguard snippets of the repository's
// Markdown (this module's README first) are the bodies of this package's Example
// functions, and the code blocks of the package doc are excerpts of them.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckSnippets(t, "README.md", "redisguard", "."); n < 1 {
		t.Errorf("README has %d marked redisguard snippets, want at least 1", n)
	}
	// The rest of the repository's Markdown, which may show it too.
	testkit.CheckAllSnippets(t, "..", "redisguard", ".")
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want 1", n)
	}
}
