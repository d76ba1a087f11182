// Package logattr builds the slog attributes every fencekit package uses, so
// records from lease, guard and sqlguard join on the same fields and never
// carry an owner token.
package logattr

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
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
