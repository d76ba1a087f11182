package docscheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// TestMarkdownLinks fails on a relative link of any Markdown file of the
// repository (README.md, docs/, every module's README.md, ...) to a file
// that does not exist, or to an #anchor its target does not have.
func TestMarkdownLinks(t *testing.T) {
	files, err := testkit.MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"README.md", "docs/concepts.md", "cmd/fencekit/README.md"} {
		if !contains(files, filepath.Join(root, must)) {
			t.Errorf("%s is not among the Markdown files checked", must)
		}
	}
	n := testkit.CheckLinks(t, files...)
	t.Logf("%d relative links in %d Markdown files checked", n, len(files))
	if n < 50 {
		t.Errorf("only %d relative links found; the link parser is broken", n)
	}
}

// TestReadmeFrontDoor: the README is at most 300 lines, and its first
// program is examples/minimal/main.go, which examples/minimal's test runs.
func TestReadmeFrontDoor(t *testing.T) {
	readme := filepath.Join(root, "README.md")
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move reference text to docs/", n)
	}
	if n := testkit.CheckFileSnippets(t, readme); n != 1 {
		t.Errorf("README.md shows %d marked files, want 1 (examples/minimal/main.go)", n)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
