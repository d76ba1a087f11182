// Package examples_test checks that the code users copy — the programs
// under examples/ and every Example function of the module — imports only
// public packages (issue 16).
package examples_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const internalPrefix = "github.com/fencekit/fencekit/internal"

// pending lists the Example files, relative to the module root, that still
// import an internal package: their packages' owners are moving them to
// integration/etcdtest. The test fails when a file not listed here imports
// one, and when a listed file no longer does (then remove it here).
var pending = []string{}

func TestExamplesImportOnlyPublicPackages(t *testing.T) {
	root := ".."
	var bad, done []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "internal") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		user := strings.HasPrefix(rel, "examples/") ||
			(strings.HasSuffix(rel, "_test.go") && strings.Contains(string(src), "\nfunc Example"))
		if !user {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		imports := false
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == internalPrefix || strings.HasPrefix(p, internalPrefix+"/") {
				imports = true
			}
		}
		switch listed := slices.Contains(pending, rel); {
		case imports && !listed:
			bad = append(bad, rel)
		case !imports && listed:
			done = append(done, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range bad {
		t.Errorf("%s: user-facing example code imports %s/...; use integration/etcdtest and integration/faults", rel, internalPrefix)
	}
	for _, rel := range done {
		t.Errorf("%s imports no internal package any more: remove it from pending", rel)
	}
}
