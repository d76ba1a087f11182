//go:build !fencekit_nosqlite

package main

// The database/sql driver "sqlite", for "mark --dsn". Build with the tag
// fencekit_nosqlite to leave it out.
import _ "modernc.org/sqlite"
