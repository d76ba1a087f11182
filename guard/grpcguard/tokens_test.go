package grpcguard_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/grpcguard"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// sentMetadata returns the MetadataKey values the unary client interceptor
// sends for a call with ctx, or its error.
func sentMetadata(ctx context.Context) ([]string, error) {
	var got []string
	err := grpcguard.UnaryClientInterceptor()(ctx, "/m", nil, nil, nil,
		func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			got = md.Get(grpcguard.MetadataKey)
			return nil
		})
	return got, err
}

func TestClientSendsSetTokens(t *testing.T) {
	bg := context.Background()
	cases := []struct {
		name string
		ctx  context.Context
		want []string
	}{
		{"none", bg, nil},
		{"one", fence.NewContext(bg, tok("items", 4)), []string{"4:items"}},
		{"set of one", fence.NewTokensContext(bg, tok("items", 4)), []string{"4:items"}},
		{"set", fence.NewTokensContext(bg, tok("a", 4), tok("b c", 4)), []string{"4:a", "4:b%20c"}},
		{"replaces", fence.NewTokensContext(metadata.AppendToOutgoingContext(bg, grpcguard.MetadataKey, "1:a"), tok("a", 4), tok("b", 4)), []string{"4:a", "4:b"}},
	}
	for _, c := range cases {
		if got, err := sentMetadata(c.ctx); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: sent %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	for _, ts := range [][]fence.Token{{tok("a", 4), tok("a", 5)}, {tok("a", 4), tok("b", 0)}} {
		if got, err := sentMetadata(fence.NewTokensContext(bg, ts...)); !errors.Is(err, fence.ErrInvalid) || got != nil {
			t.Errorf("tokens %v: sent %q, %v; want fence.ErrInvalid and nothing sent", ts, got, err)
		}
	}
}

// TestServerPicksSetToken: the server interceptor checks, of the tokens a
// call carries, the one of the lock the route binds the resource to.
func TestServerPicksSetToken(t *testing.T) {
	g := newGuard(t)
	route := func(_ context.Context, _ string, req any) (guard.Target, bool) {
		id := req.(string)
		if id == "unfenced" {
			return guard.Target{}, false
		}
		return guard.Target{Resource: "acct/" + id, Lock: "acct-" + id}, true
	}
	unary := grpcguard.UnaryServerInterceptor(g, route)
	call := func(id string, values ...string) ([]fence.Token, error) {
		md := metadata.MD{}
		for _, v := range values {
			md.Append(grpcguard.MetadataKey, v)
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		var seen []fence.Token
		_, err := unary(ctx, id, &grpc.UnaryServerInfo{FullMethod: "/m"}, func(ctx context.Context, _ any) (any, error) {
			seen = fence.TokensFromContext(ctx)
			return nil, nil
		})
		return seen, err
	}
	steps := []struct {
		id     string
		values []string
		code   codes.Code
		seen   []fence.Token
	}{
		{"1", []string{"10:acct-1", "10:acct-2"}, codes.OK, []fence.Token{tok("acct-1", 10)}},
		{"2", []string{"10:acct-1", "10:acct-2"}, codes.OK, []fence.Token{tok("acct-2", 10)}},
		{"2", []string{"10:acct-1,10:acct-2"}, codes.OK, []fence.Token{tok("acct-2", 10)}},
		{"1", []string{"11:acct-1"}, codes.OK, []fence.Token{tok("acct-1", 11)}},
		{"1", []string{"10:acct-1", "10:acct-2"}, codes.Aborted, nil},
		{"3", []string{"10:acct-1", "10:acct-2"}, codes.Aborted, nil},
		{"2", []string{"10:acct-2", "11:acct-2"}, codes.InvalidArgument, nil},
		{"2", []string{"10:acct-2,"}, codes.InvalidArgument, nil},
		{"unfenced", []string{"10:acct-1", "10:acct-2"}, codes.OK, []fence.Token{tok("acct-1", 10), tok("acct-2", 10)}},
	}
	for i, st := range steps {
		seen, err := call(st.id, st.values...)
		if status.Code(err) != st.code || !slices.Equal(seen, st.seen) {
			t.Errorf("step %d: %s with %s: code %v (%v), handler saw %v; want %v, %v", i, st.id, strings.Join(st.values, " | "), status.Code(err), err, seen, st.code, st.seen)
		}
	}
	for r, want := range map[string]fence.Token{"acct/1": tok("acct-1", 11), "acct/2": tok("acct-2", 10)} {
		if m, err := g.Mark(context.Background(), r); err != nil || m != want {
			t.Errorf("mark of %s: %v, %v; want %v", r, m, err, want)
		}
	}
}
