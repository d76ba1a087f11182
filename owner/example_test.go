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
