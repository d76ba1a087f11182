package sqlguard_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestImportsOnlyWhatItUses: a program using sqlguard with pgx neither
// links go-sql-driver/mysql nor has a "mysql" database/sql driver.
func TestImportsOnlyWhatItUses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list and go run")
	}
	out, err := exec.Command("go", "list", "-deps", "./testdata/pgxonly").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/go-sql-driver/mysql") {
			t.Errorf("a pgx-only sqlguard program depends on %s", d)
		}
	}
	t.Logf("a pgx-only sqlguard program has %d dependencies", len(deps))

	out, err = exec.Command("go", "run", "./testdata/pgxonly").Output()
	if err != nil {
		t.Fatalf("go run: %v", err)
	}
	drivers := strings.Fields(string(out))
	if slices.Contains(drivers, "mysql") || !slices.Contains(drivers, "pgx") {
		t.Errorf("sql.Drivers() = %v, want pgx and no mysql", drivers)
	}
}

// TestCoreImportsNoPgx: package sqlguard itself links no driver; pgx comes
// with sqlguard/pgxguard only.
func TestCoreImportsNoPgx(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "github.com/jackc/") || strings.HasPrefix(d, "github.com/go-sql-driver/") || strings.HasPrefix(d, "modernc.org/sqlite") {
			t.Errorf("sqlguard depends on %s", d)
		}
	}
}

// TestNoInit: no package of sqlguard's tree runs code when imported. The
// pgx path once reached sqlguard through a hook set in an init function.
func TestNoInit(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "init" {
				t.Errorf("%s: func init", fset.Position(fn.Pos()))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
