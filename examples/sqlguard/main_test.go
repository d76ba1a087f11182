package main

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSQLite runs the story on SQLite; run returns an error when a step did
// not happen as printed.
func TestSQLite(t *testing.T) {
	var out strings.Builder
	if err := run("", false, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
}

// TestPostgreSQL runs it on FENCEKIT_PG_DSN when set, through database/sql
// and through pgx.
func TestPostgreSQL(t *testing.T) {
	dsn := os.Getenv("FENCEKIT_PG_DSN")
	if dsn == "" {
		if os.Getenv("FENCEKIT_REQUIRE_DB") == "1" {
			t.Fatal("FENCEKIT_PG_DSN is not set and FENCEKIT_REQUIRE_DB=1")
		}
		t.Skip("PostgreSQL: set FENCEKIT_PG_DSN to run these tests (a database the tests may write to, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	for _, usePgx := range []bool{false, true} {
		var out strings.Builder
		if err := run(dsn, usePgx, &out); err != nil {
			t.Fatalf("pgx %v: %v\n%s", usePgx, err, out.String())
		}
		t.Log(out.String())
	}
}
