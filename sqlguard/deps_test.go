package sqlguard_test

import (
	"os/exec"
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
