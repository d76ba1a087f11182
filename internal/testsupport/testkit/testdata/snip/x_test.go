package snip

import "fmt"

func ExampleHello() {
	a := 1
	a++
	fmt.Println(a)
	// Output: 2
}
