package owner_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: README snippets marked as owner's, and the code
// blocks of the package doc, come from this package's Example functions.
func TestReadmeSnippets(t *testing.T) {
	testkit.CheckSnippets(t, "../README.md", "owner", ".")
	testkit.CheckDocSnippets(t, ".")
}
