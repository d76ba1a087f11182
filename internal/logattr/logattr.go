// Package logattr builds the slog attributes every fencekit package uses, so
// records from lease, guard and sqlguard join on the same fields and never
// carry an owner token.
package logattr

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// Hash returns 16 hex digits of the SHA-256 of s.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// Lock is the "lock" attribute: a hash of the lock name.
func Lock(name string) slog.Attr { return slog.String("lock", Hash(name)) }

// Fence is the "fence" attribute: a fencing token's revision.
func Fence(rev int64) slog.Attr { return slog.Int64("fence", rev) }

// Outcome is the "outcome" attribute.
func Outcome(o string) slog.Attr { return slog.String("outcome", o) }

// Redact replaces each non-empty name of names in s by its Hash: raw, as
// %q quotes it, and percent-encoded as in a fence token's text form, so
// that an error's text can go into a span or a log without the lock
// names it holds.
func Redact(s string, names ...string) string {
	var pairs []string
	for _, v := range names {
		if v == "" {
			continue
		}
		h := Hash(v)
		q := strconv.Quote(v)
		enc := strings.TrimPrefix(fence.Token{Revision: 1, Lock: v}.String(), "1:")
		// Longer forms first: strings.Replacer tries the pairs in order.
		pairs = append(pairs, q[1:len(q)-1], h, enc, h, v, h)
	}
	if len(pairs) == 0 {
		return s
	}
	return strings.NewReplacer(pairs...).Replace(s)
}
