//go:build !fencekit_nopostgres

package main

// The database/sql driver "pgx", for "mark --dsn". Build with the tag
// fencekit_nopostgres to leave it out.
import _ "github.com/jackc/pgx/v5/stdlib"
