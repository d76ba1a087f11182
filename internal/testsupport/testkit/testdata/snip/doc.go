// Package snip is a fixture for testkit's snippet checks.
//
//	a := 1
//	...
//	fmt.Println(a)
package snip
