package check_test

import (
	"fmt"
	"time"

	"github.com/fencekit/fencekit/integration/check"
)

func ExampleCheck() {
	// Token 7 took over from token 5, and then token 5 wrote again: a
	// stale holder's write that no fence refused.
	applied := []check.Write{{Token: 5, Elem: 1}, {Token: 7, Elem: 2}, {Token: 5, Elem: 3}}
	r, err := check.Check(applied, []int64{1, 2, 3}, []int64{1, 3})
	if err != nil {
		panic(err)
	}
	fmt.Println(r)
	fmt.Println(r.Err())
	// Output:
	// applied=3 acked=3 final=2 tokens=2 violations=1 lost=1; first: token-backwards: write 2 (elem 3) carries token 5 after token 7
	// check: history breaks a rule: token-backwards: write 2 (elem 3) carries token 5 after token 7 (in all: violations=1 lost=1)
}

func ExampleHistory() {
	var h check.History
	// The resource, where it applies a write:
	h.Apply(5, 1)
	h.Apply(5, 2)
	h.Apply(9, 3)
	// The writers, when a write is acknowledged:
	h.Ack(1)
	h.Ack(3)
	r, err := h.Check()
	fmt.Println(r, err)
	// Output:
	// applied=3 acked=2 final=3 tokens=2 violations=0 lost=0 <nil>
}

func ExampleCheckLinearizable() {
	// What two clients saw, with call and return times: A (token 5)
	// read the empty register and wrote 1; B (token 7) read 1 and wrote
	// 2; then A's late write of 3, based on its old read, was accepted.
	ops := []check.Op{
		{Client: 0, Kind: check.OpRead, Token: 5, Value: 0, Outcome: check.OK, Call: 0, Return: 1},
		{Client: 0, Kind: check.OpWrite, Token: 5, Value: 1, Outcome: check.OK, Call: 2, Return: 3},
		{Client: 1, Kind: check.OpRead, Token: 7, Value: 1, Outcome: check.OK, Call: 4, Return: 5},
		{Client: 1, Kind: check.OpWrite, Token: 7, Value: 2, Outcome: check.OK, Call: 6, Return: 7},
		{Client: 0, Kind: check.OpWrite, Token: 5, Value: 3, Outcome: check.OK, Call: 8, Return: 9},
	}
	fmt.Println(check.CheckLinearizable(ops, time.Second).Verdict)
	// Refused by the fence, it would have been fine; and so would a
	// write whose answer never came.
	ops[4].Outcome = check.Stale
	fmt.Println(check.CheckLinearizable(ops, time.Second).Verdict)
	ops[4].Outcome = check.Unknown
	fmt.Println(check.CheckLinearizable(ops, time.Second).Verdict)
	// Output:
	// not-linearizable
	// linearizable
	// linearizable
}
