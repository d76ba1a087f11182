package shard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the shard snippet of docs/sharding.md and the package doc's
// code block are excerpts of this package's Examples.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckAllSnippets(t, "..", "shard", "."); n < 1 {
		t.Errorf("the Markdown files have %d marked shard snippets, want at least 1", n)
	}
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want at least 1", n)
	}
}
