package grpcguard_test

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/grpcguard"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func ExampleUnaryServerInterceptor() {
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	// Every call of the Orders service writes resource "orders", bound to
	// lock "orders".
	route := func(context.Context, string, any) (guard.Target, bool) {
		return guard.Target{Resource: "orders", Lock: "orders"}, true
	}
	intercept := grpcguard.UnaryServerInterceptor(g, route)
	// Pass it to grpc.NewServer with grpc.UnaryInterceptor(intercept);
	// here it is called directly, as the server would.
	info := &grpc.UnaryServerInfo{FullMethod: "/example.Orders/Put"}
	handler := func(ctx context.Context, req any) (any, error) {
		t, _ := fence.FromContext(ctx)
		fmt.Println("write with", t)
		return "ok", nil
	}
	call := func(token string) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcguard.MetadataKey, token))
		if _, err := intercept(ctx, nil, info, handler); err != nil {
			fmt.Println("refused:", status.Code(err))
		}
	}
	call("7:orders")
	call("9:orders")
	call("7:orders")
	// Output:
	// write with 7:orders
	// write with 9:orders
	// refused: Aborted
}

// Every refusal's status code and ErrorInfo reason come from its outcome.
func ExampleCode() {
	for _, o := range []fence.Outcome{fence.Stale, fence.WrongLock, fence.MarkAhead, fence.Unverified, fence.Malformed} {
		fmt.Println(o, grpcguard.Code(o), grpcguard.Reason(o))
	}
	// Output:
	// stale Aborted STALE_FENCING_TOKEN
	// wrong_lock Aborted WRONG_LOCK_FENCING_TOKEN
	// mark_ahead FailedPrecondition FENCING_MARK_AHEAD
	// unverified PermissionDenied UNVERIFIED_FENCING_TOKEN
	// malformed InvalidArgument MALFORMED_FENCING_TOKEN
}
