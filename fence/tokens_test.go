package fence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

func TestTokensContext(t *testing.T) {
	bg := context.Background()
	a, b := fence.Token{Lock: "a", Revision: 7}, fence.Token{Lock: "b", Revision: 7}

	if ts := fence.TokensFromContext(bg); ts != nil {
		t.Errorf("TokensFromContext(no token) = %v, want nil", ts)
	}
	one := fence.NewContext(bg, a)
	if ts := fence.TokensFromContext(one); !slices.Equal(ts, []fence.Token{a}) {
		t.Errorf("TokensFromContext(NewContext) = %v, want [%v]", ts, a)
	}
	if got, ok := fence.FromContext(fence.NewTokensContext(bg, a)); !ok || got != a {
		t.Errorf("FromContext(NewTokensContext of one) = %v, %v; want %v", got, ok, a)
	}

	in := []fence.Token{a, b}
	set := fence.NewTokensContext(bg, in...)
	in[0] = fence.Token{Lock: "changed", Revision: 1}
	if ts := fence.TokensFromContext(set); !slices.Equal(ts, []fence.Token{a, b}) {
		t.Errorf("TokensFromContext(set) = %v, want [%v %v] (a copy of the tokens given)", ts, a, b)
	}
	fence.TokensFromContext(set)[0] = fence.Token{}
	if ts := fence.TokensFromContext(set); ts[0] != a {
		t.Errorf("TokensFromContext returned the context's own slice")
	}
	if got, ok := fence.FromContext(set); ok || !got.IsZero() {
		t.Errorf("FromContext(set of two) = %v, %v; want none", got, ok)
	}
	for _, c := range []struct {
		ctx  context.Context
		lock string
		want fence.Token
		ok   bool
	}{{set, "a", a, true}, {set, "b", b, true}, {set, "c", fence.Token{}, false},
		{one, "a", a, true}, {one, "b", fence.Token{}, false}, {bg, "a", fence.Token{}, false}} {
		if got, ok := fence.TokenFromContext(c.ctx, c.lock); ok != c.ok || got != c.want {
			t.Errorf("TokenFromContext(%q) = %v, %v; want %v, %v", c.lock, got, ok, c.want, c.ok)
		}
	}
	// Each replaces what the parent carried.
	if ts := fence.TokensFromContext(fence.NewContext(set, b)); !slices.Equal(ts, []fence.Token{b}) {
		t.Errorf("NewContext over a set: %v, want [%v]", ts, b)
	}
	if ts := fence.TokensFromContext(fence.NewTokensContext(one)); ts != nil {
		t.Errorf("NewTokensContext() over a token: %v, want none", ts)
	}
	if _, ok := fence.FromContext(fence.NewTokensContext(one)); ok {
		t.Errorf("FromContext(NewTokensContext()) found a token")
	}
}

func TestValidateTokens(t *testing.T) {
	tk := func(l string, r int64) fence.Token { return fence.Token{Lock: l, Revision: r} }
	most := make([]fence.Token, fence.MaxTokens)
	for i := range most {
		most[i] = tk(fmt.Sprint("l", i), 3)
	}
	for _, ok := range [][]fence.Token{{tk("a", 1)}, {tk("a", 1), tk("b", 2)}, most} {
		if err := fence.ValidateTokens(ok); err != nil {
			t.Errorf("ValidateTokens(%d tokens) = %v", len(ok), err)
		}
	}
	for _, bad := range [][]fence.Token{nil, {tk("a", 0)}, {tk("a", 1), tk("a/b", 1)}, {tk("a", 1), tk("a", 1)},
		{tk("a", 1), tk("b", 1), tk("a", 2)}, append(most, tk("x", 1))} {
		if err := fence.ValidateTokens(bad); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("ValidateTokens(%d tokens) = %v, want fence.ErrInvalid", len(bad), err)
		}
	}
}
