package examples_test

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// guard.WithTracerProvider: each fencing decision is a span on the caller's TracerProvider, carrying
// the outcome, the token's revision and the mark, and a hash of the lock
// name in place of the name.
func Example_guardTracing() {
	exp := tracetest.NewInMemoryExporter() // in production: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	g, err := guard.New(guard.NewMemoryStore(), guard.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	report := guard.Target{Resource: "report", Lock: "report-writer"}
	nop := func(context.Context) error { return nil }
	g.Do(ctx, report, fence.Token{Lock: "report-writer", Revision: 12}, nop)
	g.Do(ctx, report, fence.Token{Lock: "report-writer", Revision: 7}, nop)

	for _, s := range exp.GetSpans() {
		fmt.Print(s.Name)
		for _, a := range s.Attributes {
			fmt.Printf(" %s=%s", a.Key, a.Value.String())
		}
		fmt.Printf(" status=%s\n", s.Status.Code)
	}
	fmt.Println(guard.LockHash("report-writer"))
	// Output:
	// fencekit.guard.do fencekit.resource=report fencekit.lock=bbe997787c89431f fencekit.outcome=accepted fencekit.fence=12 fencekit.mark=12 status=Unset
	// fencekit.guard.do fencekit.resource=report fencekit.lock=bbe997787c89431f fencekit.outcome=stale fencekit.fence=7 fencekit.mark=12 status=Error
	// bbe997787c89431f
}
