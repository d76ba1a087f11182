package owner

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// maxInstanceLen is the longest instance id, in bytes.
	maxInstanceLen = 63
	// randomBytes is the size of the per-token random part: 96 bits.
	randomBytes = 12
	// sep separates the three parts of a token's wire form.
	sep = "."
)

// ErrMalformed reports text that is not an owner token (see Parse).
var ErrMalformed = errors.New("owner: malformed token")

// Token is one acquisition's owner token. The zero Token is invalid.
//
// Print it freely: String, GoString and LogValue show only its digest.
type Token struct {
	v string
}

// Value returns the token's wire form, for writing into the lock record and
// comparing in etcd transactions. It is the only method that reveals the
// token; never log its result or send it to another service.
func (t Token) Value() string { return t.v }

// Digest returns a short, stable hash of the token (16 hex digits of its
// SHA-256), the only form of it that may appear in logs, errors and metrics.
func (t Token) Digest() string {
	if t.v == "" {
		return "none"
	}
	sum := sha256.Sum256([]byte(t.v))
	return hex.EncodeToString(sum[:8])
}

// Instance returns the instance id part of the token. It names a pod or host
// and is not secret.
func (t Token) Instance() string {
	inst, _, _ := strings.Cut(t.v, sep)
	return inst
}

// Started returns the process-start time the token carries (its epoch, to
// the millisecond): a lower bound on when the token was made. It returns
// the zero Time for the zero Token.
func (t Token) Started() time.Time {
	_, rest, _ := strings.Cut(t.v, sep)
	epoch, _, _ := strings.Cut(rest, sep)
	ms, err := strconv.ParseInt(epoch, 36, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// String returns "owner:" followed by the digest; never the token itself.
func (t Token) String() string { return "owner:" + t.Digest() }

// GoString returns the same as String, so %#v does not reveal the token.
func (t Token) GoString() string { return t.String() }

// LogValue implements slog.LogValuer: a logged token shows as its digest.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.Digest()) }

// parseError describes text that Parse refused. It never holds the text
// itself, which may be a secret: only its length and what is wrong.
type parseError struct {
	n      int    // length of the refused text in bytes
	reason string // what is wrong with it
}

func (e *parseError) Error() string {
	return fmt.Sprintf("owner: malformed token (%d bytes): %s", e.n, e.reason)
}

// Is reports whether target is ErrMalformed.
func (e *parseError) Is(target error) bool { return target == ErrMalformed }

// Parse parses a token's wire form as returned by Value: an instance id, the
// epoch in base 36 and 16 characters of unpadded base64url (96 bits), joined
// by ".". For anything else it returns an error matching ErrMalformed,
// which gives the text's length and what is wrong but never the text.
func Parse(s string) (Token, error) {
	bad := func(reason string) (Token, error) { return Token{}, &parseError{n: len(s), reason: reason} }
	if len(s) > maxInstanceLen+1+13+1+16 {
		return bad("too long")
	}
	parts := strings.Split(s, sep)
	if len(parts) != 3 {
		return bad("want three parts separated by " + strconv.Quote(sep))
	}
	if err := validInstance(parts[0]); err != nil {
		return bad(err.Error())
	}
	if parts[1] == "" || parts[1] != strings.ToLower(parts[1]) {
		return bad("epoch is not lower-case base 36")
	}
	if _, err := strconv.ParseUint(parts[1], 36, 63); err != nil {
		return bad("epoch is not lower-case base 36")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil || len(raw) != randomBytes {
		return bad("random part is not 16 characters of base64url")
	}
	return Token{v: s}, nil
}

// Source makes owner tokens for one process. It is safe for concurrent use.
type Source struct {
	prefix string // instance + sep + epoch + sep
}

// NewSource returns a Source for the given instance id and process-start
// time. The id must be 1 to 63 bytes of ASCII letters, digits, '-' and '_'
// (a Kubernetes pod name qualifies; a host name once its '.' are
// replaced).
func NewSource(instance string, start time.Time) (*Source, error) {
	if err := validInstance(instance); err != nil {
		return nil, fmt.Errorf("owner: instance id %q: %w", instance, err)
	}
	epoch := start.UnixMilli()
	if epoch < 0 {
		return nil, fmt.Errorf("owner: start time %v is before 1970", start)
	}
	return &Source{prefix: instance + sep + strconv.FormatInt(epoch, 36) + sep}, nil
}

// New returns a new token. It reads 96 bits from crypto/rand, which never
// fails on supported platforms (Go 1.24+ crashes the program rather than
// return weak randomness).
func (s *Source) New() Token {
	var raw [randomBytes]byte
	_, _ = rand.Read(raw[:])
	return Token{v: s.prefix + base64.RawURLEncoding.EncodeToString(raw[:])}
}

// Instance returns the instance id tokens from s carry.
func (s *Source) Instance() string {
	inst, _, _ := strings.Cut(s.prefix, sep)
	return inst
}

var (
	processStart = time.Now()
	defaultOnce  sync.Once
	defaultSrc   *Source
)

// Default returns the process-wide Source, built from [DefaultInstance] and
// the time this package was initialised.
func Default() *Source {
	defaultOnce.Do(func() {
		s, err := NewSource(DefaultInstance(), processStart)
		if err != nil { // DefaultInstance always returns a valid id
			panic(err)
		}
		defaultSrc = s
	})
	return defaultSrc
}

// DefaultInstance returns the instance id used by Default: the first
// non-empty of the environment variables FENCEKIT_INSTANCE, POD_NAME (set
// through the Kubernetes downward API) and HOSTNAME (a pod's name inside
// Kubernetes), then os.Hostname, then "unknown". Characters outside
// [A-Za-z0-9_-] become '-', and the id is cut to 63 bytes.
func DefaultInstance() string {
	for _, env := range []string{"FENCEKIT_INSTANCE", "POD_NAME", "HOSTNAME"} {
		if v := sanitizeInstance(os.Getenv(env)); v != "" {
			return v
		}
	}
	if h, err := os.Hostname(); err == nil {
		if v := sanitizeInstance(h); v != "" {
			return v
		}
	}
	return "unknown"
}

// sanitizeInstance maps s to a valid instance id: characters outside
// [A-Za-z0-9_-] become '-', and the result is cut to maxInstanceLen bytes.
// It returns "" when nothing usable is left.
func sanitizeInstance(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < maxInstanceLen; i++ {
		c := s[i]
		if instanceByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	return out
}

func instanceByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func validInstance(s string) error {
	if s == "" {
		return errors.New("instance id is empty")
	}
	if len(s) > maxInstanceLen {
		return fmt.Errorf("instance id is longer than %d bytes", maxInstanceLen)
	}
	for i := 0; i < len(s); i++ {
		if !instanceByte(s[i]) {
			return errors.New("instance id has a byte outside [A-Za-z0-9_-]")
		}
	}
	return nil
}

// ProcessStart returns the time this package was initialised, which Default
// uses as the process-start epoch.
func ProcessStart() time.Time { return processStart }
