// Command httponly is a resource server that uses only guard's HTTP
// middleware with a MemoryStore. TestImportsOnlyWhatItUses lists its
// dependencies: neither etcd nor gRPC may be among them.
package main

import (
	"log"
	"net/http"

	"github.com/fencekit/fencekit/guard"
)

func main() {
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		log.Fatal(err)
	}
	mw := g.Middleware(func(r *http.Request) (guard.Target, bool) {
		return guard.Target{Resource: r.URL.Path, Lock: "orders"}, true
	})
	_ = mw(http.NotFoundHandler())
	_ = &http.Client{Transport: &guard.Transport{}}
}
