package owner_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/owner"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTokensAreUniqueAndParse(t *testing.T) {
	src, err := owner.NewSource("pod-7", time.UnixMilli(1_700_000_000_000))
	require.NoError(t, err)
	seen := map[string]bool{}
	for range 10000 {
		tok := src.New()
		v := tok.Value()
		require.False(t, seen[v], "duplicate token")
		seen[v] = true
		assert.LessOrEqual(t, len(v), len("pod-7")+1+8+1+16, "short on the wire")
		assert.Equal(t, "pod-7", tok.Instance())
		got, err := owner.Parse(v)
		require.NoError(t, err)
		assert.Equal(t, tok, got)
	}
}

func TestTokenNeverPrints(t *testing.T) {
	tok := owner.Default().New()
	v := tok.Value()
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "owner", tok)
	for _, out := range []string{tok.String(), fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok), buf.String()} {
		assert.NotContains(t, out, v)
		assert.Contains(t, out, tok.Digest())
	}
	assert.Len(t, tok.Digest(), 16)
	assert.NotEqual(t, tok.Digest(), owner.Default().New().Digest())
	_, err := owner.Parse(v[:len(v)-1] + "!")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), v[:len(v)-1], "parse errors do not echo the token")
}

func TestParseRejects(t *testing.T) {
	src, _ := owner.NewSource("h", time.Now())
	good := src.New().Value()
	parts := strings.Split(good, ".")
	bad := []string{"", "a.b", "a.b.c.d", "." + parts[1] + "." + parts[2], "bad host." + parts[1] + "." + parts[2],
		parts[0] + ".UPPER." + parts[2], parts[0] + "..", parts[0] + "." + parts[1] + ".short",
		parts[0] + "." + parts[1] + "." + parts[2] + "A", strings.Repeat("x", 200)}
	for _, s := range bad {
		_, err := owner.Parse(s)
		require.ErrorIs(t, err, owner.ErrMalformed, "%q", s)
		if len(s) > 3 {
			require.NotContains(t, err.Error(), s, "parse errors never echo the text")
		}
	}
}

func TestInstance(t *testing.T) {
	for _, bad := range []string{"", "has space", "dot.ted", strings.Repeat("a", 64)} {
		_, err := owner.NewSource(bad, time.Now())
		require.Error(t, err, "%q", bad)
	}
	_, err := owner.NewSource(strings.Repeat("a", 63), time.Now())
	require.NoError(t, err, "63 bytes")
	t.Setenv("FENCEKIT_INSTANCE", "")
	t.Setenv("POD_NAME", "checkout-6d4b9-x2x7q")
	assert.Equal(t, "checkout-6d4b9-x2x7q", owner.DefaultInstance())
	t.Setenv("FENCEKIT_INSTANCE", "custom.id")
	assert.Equal(t, "custom-id", owner.DefaultInstance())
	t.Setenv("FENCEKIT_INSTANCE", "...")
	assert.Equal(t, "checkout-6d4b9-x2x7q", owner.DefaultInstance(), "nothing usable left: next source")
	t.Setenv("FENCEKIT_INSTANCE", strings.Repeat("a", 100))
	assert.Len(t, owner.DefaultInstance(), 63)
}

func TestStarted(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 123_456_789, time.UTC)
	src, err := owner.NewSource("web-1", start)
	require.NoError(t, err)
	tok, err := owner.Parse(src.New().Value())
	require.NoError(t, err)
	assert.True(t, tok.Started().Equal(start.Truncate(time.Millisecond)), "Started() = %v; want %v", tok.Started(), start)
	assert.True(t, owner.Token{}.Started().IsZero(), "the zero Token's Started is not zero")
}

func FuzzParse(f *testing.F) {
	src, _ := owner.NewSource("seed", time.UnixMilli(1))
	f.Add(src.New().Value())
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := owner.Parse(s)
		if err != nil {
			if !errors.Is(err, owner.ErrMalformed) {
				t.Fatalf("error does not match ErrMalformed: %v", err)
			}
			return
		}
		if tok.Value() != s {
			t.Fatalf("Parse changed the token")
		}
		if strings.Contains(tok.String(), s) {
			t.Fatalf("String reveals the token")
		}
	})
}
