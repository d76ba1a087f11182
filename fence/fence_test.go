package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheck(t *testing.T) {
	mark := fence.Token{Lock: "orders", Revision: 10}
	cases := []struct {
		name string
		mark fence.Token
		tok  fence.Token
		want error
	}{
		{"equal", mark, fence.Token{"orders", 10}, nil},
		{"newer", mark, fence.Token{"orders", 11}, nil},
		{"older", mark, fence.Token{"orders", 9}, fence.ErrStale},
		{"wrong lock numerically higher", mark, fence.Token{"payments", 99}, fence.ErrWrongLock},
		{"no mark yet", fence.Token{}, fence.Token{"orders", 1}, nil},
		{"zero revision", mark, fence.Token{"orders", 0}, fence.ErrInvalid},
		{"negative revision", fence.Token{}, fence.Token{"orders", -5}, fence.ErrInvalid},
		{"empty lock", fence.Token{}, fence.Token{"", 5}, fence.ErrInvalid},
		{"oversized lock", fence.Token{}, fence.Token{strings.Repeat("a", fence.MaxNameLen+1), 5}, fence.ErrInvalid},
		{"slash in lock", fence.Token{}, fence.Token{"a/b", 5}, fence.ErrInvalidName},
		{"control in lock", fence.Token{}, fence.Token{"a\x85b", 5}, fence.ErrInvalidName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := fence.Check(tc.mark, tc.tok)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
	var se *fence.RefusedError
	require.ErrorAs(t, fence.Check(mark, fence.Token{"orders", 3}), &se)
	assert.Equal(t, fence.Stale, se.Outcome)
	assert.Equal(t, int64(3), se.Token.Revision)
	assert.Equal(t, mark, se.Mark)
	var we *fence.RefusedError
	require.ErrorAs(t, fence.Check(mark, fence.Token{"x", 30}), &we)
	assert.Equal(t, fence.WrongLock, we.Outcome)
	assert.Equal(t, "orders", we.Lock)
}

func TestMax(t *testing.T) {
	a := fence.Token{"l", 5}
	b := fence.Token{"l", 7}
	assert.Equal(t, b, fence.Max(a, b))
	assert.Equal(t, b, fence.Max(b, a))
	assert.Equal(t, a, fence.Max(a, fence.Token{}))
	assert.Equal(t, a, fence.Max(fence.Token{}, a))
	assert.Equal(t, a, fence.Max(a, fence.Token{"other", 100}))
}

func TestTextRoundTrip(t *testing.T) {
	names := []string{"orders", "a", "with space", "percent%", "colon:in:name", "ünïcødé",
		"-._~", strings.Repeat("z", fence.MaxNameLen), "CAPS", "42:7"}
	for _, n := range names {
		tok := fence.Token{Lock: n, Revision: 9223372036854775807}
		s := tok.String()
		for i := 0; i < len(s); i++ {
			require.Less(t, s[i], byte(0x7f), "text form is ASCII")
			require.Greater(t, s[i], byte(0x20), "text form has no spaces or controls")
		}
		got, err := fence.Parse(s)
		require.NoError(t, err, "%q", s)
		assert.Equal(t, tok, got)
		b, err := tok.MarshalText()
		require.NoError(t, err)
		var u fence.Token
		require.NoError(t, u.UnmarshalText(b))
		assert.Equal(t, tok, u)
	}
	assert.Equal(t, "42:orders", fence.Token{"orders", 42}.String())
	assert.Equal(t, "7:a%20b%3A", fence.Token{"a b:", 7}.String())
}

func TestParseRejects(t *testing.T) {
	bad := []string{"", "42", ":orders", "0:orders", "-1:orders", "+1:orders", "01:orders", "1.5:x",
		"9223372036854775808:x", "42:", "42:a b", "42:%41", "42:%2f", "42:%2", "42:%", "42:%GG", "x:orders",
		"42:" + strings.Repeat("a", fence.MaxNameLen+1), "42:a\n", "42:a/b", "42:a%2Fb", "42:%00", "42:%FF",
		"42:%C2%85"}
	for _, s := range bad {
		_, err := fence.Parse(s)
		require.ErrorIs(t, err, fence.ErrSyntax, "%q", s)
		var se *fence.SyntaxError
		require.True(t, errors.As(err, &se))
	}
	_, err := fence.Token{}.MarshalText()
	require.ErrorIs(t, err, fence.ErrInvalid)
}

func TestValidateName(t *testing.T) {
	good := []string{"orders", "a", strings.Repeat("é", fence.MaxNameLen/2), "with space", "colon:x", "日本"}
	for _, n := range good {
		require.NoError(t, fence.ValidateName(n), "%q", n)
	}
	bad := []string{"", strings.Repeat("a", fence.MaxNameLen+1), "a/b", "/", "a\x00", "a\tb", "\x7f", "a\u0085b",
		"\xff", "a\xc3"}
	for _, n := range bad {
		err := fence.ValidateName(n)
		require.ErrorIs(t, err, fence.ErrInvalidName, "%q", n)
		require.ErrorIs(t, err, fence.ErrInvalid, "%q", n)
		var ne *fence.NameError
		require.ErrorAs(t, err, &ne)
		assert.NotEmpty(t, ne.Reason)
		assert.LessOrEqual(t, len(ne.Name), 64)
		require.ErrorIs(t, fence.Token{Lock: n, Revision: 1}.Validate(), fence.ErrInvalidName, "%q", n)
	}
}

func TestContext(t *testing.T) {
	_, ok := fence.FromContext(context.Background())
	assert.False(t, ok)
	tok := fence.Token{"l", 3}
	got, ok := fence.FromContext(fence.NewContext(context.Background(), tok))
	assert.True(t, ok)
	assert.Equal(t, tok, got)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"42:orders", "1:a%20b", "0:x", "42:%41", "9223372036854775807:z", ":", "1:%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fence.Parse(s)
		if err != nil {
			if !errors.Is(err, fence.ErrSyntax) {
				t.Fatalf("error %v does not match ErrSyntax", err)
			}
			return
		}
		if err := tok.Validate(); err != nil {
			t.Fatalf("Parse(%q) returned invalid token: %v", s, err)
		}
		if got := tok.String(); got != s {
			t.Fatalf("Parse accepted non-canonical %q (canonical %q)", s, got)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add("orders", int64(1))
	f.Add("a/b c%", int64(99))
	f.Fuzz(func(t *testing.T, name string, rev int64) {
		tok := fence.Token{Lock: name, Revision: rev}
		got, err := fence.Parse(tok.String())
		if tok.Validate() != nil {
			if err == nil {
				t.Fatalf("invalid token %#v parsed back", tok)
			}
			return
		}
		if err != nil || got != tok {
			t.Fatalf("round trip of %#v: %#v, %v", tok, got, err)
		}
	})
}
