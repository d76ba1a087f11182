//go:build !fencekit_nomysql

package main

// The database/sql driver "mysql", for "mark --dsn". Build with the tag
// fencekit_nomysql to leave it out.
import _ "github.com/go-sql-driver/mysql"
