// Command pgxonly uses sqlguard with PostgreSQL through pgx only. It
// prints the database/sql drivers registered in it, one a line:
// TestImportsOnlyWhatItUses checks that "mysql" is not among them and
// that go-sql-driver/mysql is not among its dependencies.
package main

import (
	"database/sql"
	"fmt"
	"log"

	"github.com/fencekit/fencekit/sqlguard"
	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	if _, err := sqlguard.New(sqlguard.PostgreSQL); err != nil {
		log.Fatal(err)
	}
	for _, d := range sql.Drivers() {
		fmt.Println(d)
	}
}
