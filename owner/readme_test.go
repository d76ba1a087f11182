package owner_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the snippets marked as owner's in the repository's
// Markdown (README.md, docs/), and the code blocks of the package doc,
// come from this package's Example functions.
func TestReadmeSnippets(t *testing.T) {
	testkit.CheckAllSnippets(t, "..", "owner", ".")
	testkit.CheckDocSnippets(t, ".")
}
