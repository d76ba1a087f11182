package etcdstore_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: README snippets marked as etcdstore's, and the code
// blocks of the package doc, come from this package's Example functions.
func TestReadmeSnippets(t *testing.T) {
	testkit.CheckSnippets(t, "../../README.md", "etcdstore", ".")
	testkit.CheckDocSnippets(t, ".")
}
