package shard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the README's shard snippet and the package doc's
// code block are excerpts of this package's Examples.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckSnippets(t, "../README.md", "shard", "."); n < 1 {
		t.Errorf("README has %d marked shard snippets, want at least 1", n)
	}
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want at least 1", n)
	}
}
