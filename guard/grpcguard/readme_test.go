package grpcguard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: README snippets marked as grpcguard's, and the code
// blocks of the package doc, come from this package's Example functions.
func TestReadmeSnippets(t *testing.T) {
	testkit.CheckSnippets(t, "../../README.md", "grpcguard", ".")
	testkit.CheckDocSnippets(t, ".")
}
