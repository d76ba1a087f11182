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
	if err := run("", &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
}

// TestPostgreSQL runs it on FENCEKIT_PG_DSN when set.
func TestPostgreSQL(t *testing.T) {
	dsn := os.Getenv("FENCEKIT_PG_DSN")
	if dsn == "" {
		if os.Getenv("FENCEKIT_REQUIRE_DB") == "1" {
			t.Fatal("FENCEKIT_PG_DSN is not set and FENCEKIT_REQUIRE_DB=1")
		}
		t.Skip("FENCEKIT_PG_DSN not set: to run this against PostgreSQL, set it, e.g. FENCEKIT_PG_DSN=postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	}
	var out strings.Builder
	if err := run(dsn, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
}
