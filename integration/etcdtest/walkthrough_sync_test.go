package etcdtest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// walkthroughOf returns the walkthrough of a test file: the lines from
// "// walkthrough:begin" to "// walkthrough:end".
func walkthroughOf(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(b, []byte("// walkthrough:begin"))
	end := bytes.Index(b, []byte("// walkthrough:end"))
	if begin < 0 || end < begin {
		t.Fatalf("%s: no walkthrough:begin ... walkthrough:end", path)
	}
	return b[begin:end]
}

// The walkthrough also runs in the module under examples/walkthrough,
// which imports only public packages; the two copies must not drift.
func TestWalkthroughCopiesMatch(t *testing.T) {
	here := walkthroughOf(t, "walkthrough_test.go")
	there := walkthroughOf(t, filepath.Join("..", "..", "examples", "walkthrough", "walkthrough_test.go"))
	if !bytes.Equal(here, there) {
		t.Error("the walkthrough in examples/walkthrough differs from integration/etcdtest/walkthrough_test.go; copy it over")
	}
}

// The README shows the walkthrough; it must be the one that runs.
func TestWalkthroughInREADME(t *testing.T) {
	code := bytes.TrimSpace(bytes.TrimPrefix(walkthroughOf(t, "walkthrough_test.go"), []byte("// walkthrough:begin")))
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, code) {
		t.Error("README.md does not show the walkthrough of walkthrough_test.go as it is; copy it over")
	}
}
