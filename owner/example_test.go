package owner_test

import (
	"fmt"
	"time"

	"github.com/fencekit/fencekit/owner"
)

func ExampleSource_New() {
	src, err := owner.NewSource("checkout-6d4b9-x2x7q", time.Now())
	if err != nil {
		panic(err)
	}
	a, b := src.New(), src.New()
	fmt.Println("unique:", a.Value() != b.Value())
	fmt.Println("instance:", a.Instance())
	// Printing a token shows only its digest.
	fmt.Println("printed form hides the token:", fmt.Sprint(a) == "owner:"+a.Digest())
	// Output:
	// unique: true
	// instance: checkout-6d4b9-x2x7q
	// printed form hides the token: true
}

func ExampleParse() {
	_, err := owner.Parse("not a token")
	fmt.Println(err)
	// Output: owner: malformed token (11 bytes): want three parts separated by "."
}

// Started tells when the process that made a token started, for instance
// to report how old a lock record's owner is.
func ExampleToken_Started() {
	src, err := owner.NewSource("web-1", time.Date(2026, 12, 4, 10, 30, 0, 0, time.UTC))
	if err != nil {
		panic(err)
	}
	tok, err := owner.Parse(src.New().Value()) // as read from a lock record
	if err != nil {
		panic(err)
	}
	fmt.Println(tok.Instance(), tok.Started().UTC())
	// Output: web-1 2026-12-04 10:30:00 +0000 UTC
}
