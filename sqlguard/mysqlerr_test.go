package sqlguard_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/sqlguard"
	"github.com/go-sql-driver/mysql"
)

// TestClassifyMySQLWithoutImport: the driver's errors are classified by
// their number although sqlguard does not import the driver, wherever they
// sit in the error tree.
func TestClassifyMySQLWithoutImport(t *testing.T) {
	for _, d := range []sqlguard.Dialect{sqlguard.MySQL, sqlguard.MariaDB} {
		g, err := sqlguard.New(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			err  error
			want bool
		}{
			{&mysql.MySQLError{Number: 1213}, true},
			{&mysql.MySQLError{Number: 1205}, true},
			{&mysql.MySQLError{Number: 1020}, true},
			{fmt.Errorf("exec: %w", &mysql.MySQLError{Number: 1213}), true},
			{errors.Join(errors.New("other"), fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1205})), true},
			{&mysql.MySQLError{Number: 1062}, false},
			{(*mysql.MySQLError)(nil), false},
			{mysql.ErrInvalidConn, false},
			{errors.New("Error 1213: deadlock"), false},
		} {
			got := errors.Is(g.Classify(c.err), sqlguard.ErrRetryable)
			if got != c.want {
				t.Errorf("%v: Classify(%#v) retryable = %v, want %v", d, c.err, got, c.want)
			}
		}
	}
}
