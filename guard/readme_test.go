package guard_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// TestReadmeSnippets: the guard snippets of the repository's Markdown
// (docs/guard.md, docs/operations.md) are the bodies (or
// marked excerpts) of this package's Example functions, and the code
// blocks of the package doc are excerpts of them, so neither can drift
// from code that compiles and whose output is checked.
func TestReadmeSnippets(t *testing.T) {
	if n := testkit.CheckAllSnippets(t, "..", "guard", "."); n < 2 {
		t.Errorf("the Markdown files have %d marked guard snippets, want at least 2 (the HTTP quick snippet and the verifier's)", n)
	}
	// guard's tracing example lives in the examples module, which may
	// require an OpenTelemetry SDK (this module does not).
	if n := testkit.CheckAllSnippets(t, "..", "examples", "../examples"); n < 1 {
		t.Errorf("the Markdown files have %d marked examples snippets, want guard's tracing one", n)
	}
	if n := testkit.CheckDocSnippets(t, "."); n < 1 {
		t.Errorf("doc.go has %d code blocks, want the verifier's", n)
	}
}
