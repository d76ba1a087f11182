package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

func ExampleCheck() {
	mark := fence.Token{Lock: "orders", Revision: 41}

	for _, t := range []fence.Token{
		{Lock: "orders", Revision: 41},   // the same holder again
		{Lock: "orders", Revision: 57},   // a newer holder
		{Lock: "orders", Revision: 12},   // a holder that was superseded
		{Lock: "payments", Revision: 99}, // another lock altogether
	} {
		err := fence.Check(mark, t)
		switch {
		case err == nil:
			mark = fence.Max(mark, t)
			fmt.Println(t, "accepted, mark", mark.Revision)
		case errors.Is(err, fence.ErrStale):
			fmt.Println(t, "refused: stale")
		case errors.Is(err, fence.ErrWrongLock):
			fmt.Println(t, "refused: wrong lock")
		}
	}
	// Output:
	// 41:orders accepted, mark 41
	// 57:orders accepted, mark 57
	// 12:orders refused: stale
	// 99:payments refused: wrong lock
}

func ExampleParse() {
	t, err := fence.Parse("42:shard%2001")
	fmt.Printf("%q %d %v\n", t.Lock, t.Revision, err)
	_, err = fence.Parse("0:orders")
	fmt.Println(errors.Is(err, fence.ErrSyntax))
	// Output:
	// "shard 01" 42 <nil>
	// true
}

func ExampleNewContext() {
	ctx := fence.NewContext(context.Background(), fence.Token{Lock: "orders", Revision: 7})
	t, ok := fence.FromContext(ctx)
	fmt.Println(t, ok)
	// Output: 7:orders true
}

// Lock names follow one rule across the module.
func ExampleValidateName() {
	fmt.Println(fence.ValidateName("orders"))
	err := fence.ValidateName("orders/eu")
	fmt.Println(errors.Is(err, fence.ErrInvalidName), err)
	// Output:
	// <nil>
	// true fence: invalid lock name "orders/eu": contains "/"
}

// Every refused token is a *RefusedError, whichever resource refused it;
// its Outcome is the word of the metrics and logs.
func ExampleRefusedError() {
	mark := fence.Token{Lock: "orders", Revision: 42}
	err := fence.Check(mark, fence.Token{Lock: "orders", Revision: 7})
	var r *fence.RefusedError
	if errors.As(err, &r) {
		fmt.Println(r.Outcome, r.Token.Revision, "<", r.Mark.Revision, errors.Is(err, fence.ErrStale))
	}
	// Output:
	// stale 7 < 42 true
}
