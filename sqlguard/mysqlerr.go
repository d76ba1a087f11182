package sqlguard

import (
	"reflect"
	"strings"
)

// mysqlDriverPkg is the import path of the MySQL and MariaDB driver whose
// errors sqlguard classifies, go-sql-driver/mysql. sqlguard does not
// import it: importing it registers the "mysql" database/sql driver in
// every program that imports sqlguard, PostgreSQL and SQLite users
// included, and links its code.
const mysqlDriverPkg = "github.com/go-sql-driver/mysql"

// mysqlNumber returns the server error number of the first
// *mysql.MySQLError in err's tree (its Number field: 1062 for a duplicate
// key, 1213 for a deadlock, ...). The driver's error type has no method
// that yields the number, so it is recognised by its type's name and
// package path (any major version of the driver) and read by reflection;
// errors of other types, nil pointers and fields of an unexpected type are
// not matched.
func mysqlNumber(err error) (uint16, bool) {
	for _, e := range walk(err) {
		t := reflect.TypeOf(e)
		if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || t.Elem().Name() != "MySQLError" {
			continue
		}
		if pkg := t.Elem().PkgPath(); pkg != mysqlDriverPkg && !strings.HasPrefix(pkg, mysqlDriverPkg+"/") {
			continue
		}
		v := reflect.ValueOf(e)
		if v.IsNil() {
			continue
		}
		if f := v.Elem().FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
			return uint16(f.Uint()), true
		}
	}
	return 0, false
}

// walk returns the errors of err's tree in the pre-order errors.As uses.
func walk(err error) []error {
	var out []error
	var visit func(error)
	visit = func(e error) {
		for e != nil {
			out = append(out, e)
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				e = u.Unwrap()
			case interface{ Unwrap() []error }:
				for _, c := range u.Unwrap() {
					visit(c)
				}
				return
			default:
				return
			}
		}
	}
	visit(err)
	return out
}

// isMySQLNumber reports whether err carries MySQL server error number n.
func isMySQLNumber(err error, n uint16) bool {
	got, ok := mysqlNumber(err)
	return ok && got == n
}
