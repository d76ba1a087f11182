package fence_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the snippets marked as fence's in the repository's
// Markdown (README.md, docs/), and the code blocks of the package doc,
// come from this package's Example functions.
func TestReadmeSnippets(t *testing.T) {
	testkit.CheckAllSnippets(t, "..", "fence", ".")
	testkit.CheckDocSnippets(t, ".")
}
