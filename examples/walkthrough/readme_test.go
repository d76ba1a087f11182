package walkthrough_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// docs/testing.md shows the walkthrough (the lines of walkthrough_test.go from
// "// walkthrough:begin" to "// walkthrough:end"); it must be the one that
// runs.
func TestWalkthroughInDocs(t *testing.T) {
	b, err := os.ReadFile("walkthrough_test.go")
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(b, []byte("// walkthrough:begin"))
	end := bytes.Index(b, []byte("// walkthrough:end"))
	if begin < 0 || end < begin {
		t.Fatal("walkthrough_test.go: no walkthrough:begin ... walkthrough:end")
	}
	code := bytes.TrimSpace(bytes.TrimPrefix(b[begin:end], []byte("// walkthrough:begin")))
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "testing.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, code) {
		t.Error("docs/testing.md does not show the walkthrough of walkthrough_test.go as it is; copy it over")
	}
}
