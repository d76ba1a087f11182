package redisguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the snippets of this module's README and of the
// root README's Redis section are the bodies of this package's Example
// functions, and the code blocks of the package doc are excerpts of them.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckSnippets(t, "README.md", "redisguard", "."); n < 1 {
		t.Errorf("README has %d marked redisguard snippets, want at least 1", n)
	}
	// The root README's Redis section, when it has marked snippets.
	testkit.CheckSnippets(t, "../README.md", "redisguard", ".")
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want 1", n)
	}
}
