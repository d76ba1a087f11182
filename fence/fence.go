package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name, in bytes. It is the one limit of
// the module: lease, guard and sqlguard refuse longer names too.
const MaxNameLen = 256

var (
	// ErrStale reports a token older than the mark a resource already
	// accepted for the same lock: its holder was superseded and must stop.
	// Errors matching it are *RefusedError with Outcome Stale or
	// MarkAhead.
	ErrStale = errors.New("fence: stale token")
	// ErrWrongLock reports a token for a different lock than the one the
	// resource is bound to. Errors matching it are *RefusedError with
	// Outcome WrongLock.
	ErrWrongLock = errors.New("fence: token is for a different lock")
	// ErrMarkAhead reports a token older than a resource's mark that is
	// nevertheless its lock's current holder's: the mark is ahead of the
	// lock service and refuses every holder until an operator sets it
	// back (guard.Guard.ResetMark, sqlguard.Guard.ResetMark). A new etcd
	// cluster starts revisions again, and so does one restored without
	// --bump-revision. Errors matching it are *RefusedError with Outcome
	// MarkAhead, and match ErrStale too.
	ErrMarkAhead = errors.New("fence: mark ahead of the lock service")
	// ErrUnverified reports a token that the lock service did not confirm:
	// when it was checked, the token's lock had no current holder with the
	// token's revision (see lease.Verifier). Errors matching it are
	// *RefusedError with Outcome Unverified.
	ErrUnverified = errors.New("fence: token not issued to the lock's current holder")
	// ErrMissing reports a write to a fenced resource that carried no
	// token. Errors matching it are *RefusedError with Outcome Missing.
	ErrMissing = errors.New("fence: missing fencing token")
	// ErrInvalid reports a token that no acquisition can have made: a
	// revision <= 0, or a lock name that ValidateName refuses; and, from
	// the resources that read tokens from requests, one that does not
	// parse or is sent more than once (*RefusedError with Outcome
	// Malformed).
	ErrInvalid = errors.New("fence: invalid token")
	// ErrInvalidName reports a lock name that ValidateName refuses. Errors
	// matching it are *NameError, and also match ErrInvalid.
	ErrInvalidName = errors.New("fence: invalid lock name")
	// ErrSyntax reports text that is not a token's canonical text form.
	// Errors matching it are *SyntaxError.
	ErrSyntax = errors.New("fence: malformed token text")
	// ErrNoMark reports a resource that has accepted no token yet: it has
	// no mark. The Mark methods of guard, its stores and sqlguard return
	// errors matching it, never a zero Token.
	ErrNoMark = errors.New("fence: no mark")
	// ErrMarkChanged reports an operator's reset of a mark (ResetMark of
	// guard and sqlguard) whose expected old mark is not the resource's
	// mark: nothing was changed.
	ErrMarkChanged = errors.New("fence: mark changed")
)

// Token is a fencing token: the lock's name and the etcd creation revision of
// the key written by one acquisition of it. The zero Token is invalid and
// stands for "no token".
//
// Tokens are plain values; they are safe to copy, compare with ==, and send
// to other services.
type Token struct {
	// Lock is the name of the lock, as given to lease.Client.Acquire.
	Lock string
	// Revision is the etcd creation revision of the acquisition's key.
	Revision int64
}

// IsZero reports whether t is the zero Token.
func (t Token) IsZero() bool { return t == Token{} }

// Validate returns nil when t could have been made by an acquisition, and an
// error matching ErrInvalid otherwise: for a revision <= 0, or a lock name
// ValidateName refuses (then the error is a *NameError).
func (t Token) Validate() error {
	if t.Revision <= 0 {
		return fmt.Errorf("%w: revision %d is not positive", ErrInvalid, t.Revision)
	}
	return ValidateName(t.Lock)
}

// NameError describes a lock name that ValidateName refused. It matches
// ErrInvalidName and ErrInvalid.
type NameError struct {
	// Name is the refused name, cut to at most 64 bytes.
	Name string
	// Reason says what is wrong with it.
	Reason string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("fence: invalid lock name %q: %s", e.Name, e.Reason)
}

// Is reports whether target is ErrInvalidName or ErrInvalid.
func (e *NameError) Is(target error) bool { return target == ErrInvalidName || target == ErrInvalid }

// ValidateName returns nil for a usable lock name, and a *NameError
// otherwise. It is the one rule for lock names in this module (package
// lease's Acquire, guard's Target and sqlguard apply it): a name is 1 to
// MaxNameLen bytes of valid UTF-8 with no "/" (the separator of lease's
// etcd keys) and no control character (C0, DEL or C1).
func ValidateName(name string) error {
	bad := func(reason string) error {
		n := name
		if len(n) > 64 {
			n = n[:64]
		}
		return &NameError{Name: n, Reason: reason}
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxNameLen:
		return bad(fmt.Sprintf("%d bytes, longer than %d", len(name), MaxNameLen))
	case !utf8.ValidString(name):
		return bad("not UTF-8")
	case strings.Contains(name, "/"):
		return bad(`contains "/"`)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return bad("contains a control character")
		}
	}
	return nil
}

// Check applies the fencing rule: it reports whether a resource whose
// highest accepted token is mark may accept t. It returns nil when t is for
// the same lock as mark and t.Revision >= mark.Revision (equal is the same
// holder writing again); a *RefusedError with Outcome Stale (matching
// ErrStale) when t is older, or WrongLock (matching ErrWrongLock) when t
// names another lock, with Lock, Token and Mark set and no Resource; and an
// error matching ErrInvalid when t is invalid. A zero mark means nothing was accepted yet: any valid t passes.
//
// Check only decides. The caller must make the check and the write one
// atomic step and then advance its mark to [Max](mark, t).
func Check(mark, t Token) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if mark.IsZero() {
		return nil
	}
	if t.Lock != mark.Lock {
		return &RefusedError{Outcome: WrongLock, Lock: mark.Lock, Token: t, Mark: mark}
	}
	if t.Revision < mark.Revision {
		return &RefusedError{Outcome: Stale, Lock: mark.Lock, Token: t, Mark: mark}
	}
	return nil
}

// Max returns the newer of two tokens for the same lock, or the non-zero one
// when one is zero. For tokens of different locks it returns a: marks of
// different locks do not order.
func Max(a, b Token) Token {
	switch {
	case a.IsZero():
		return b
	case b.IsZero(), a.Lock != b.Lock:
		return a
	case b.Revision > a.Revision:
		return b
	}
	return a
}

// String returns the canonical text form "<revision>:<percent-encoded
// name>". Parse(t.String()) returns t for every valid t.
func (t Token) String() string {
	var b strings.Builder
	b.Grow(len(t.Lock) + 21)
	b.WriteString(strconv.FormatInt(t.Revision, 10))
	b.WriteByte(':')
	escape(&b, t.Lock)
	return b.String()
}

// MarshalText implements encoding.TextMarshaler with the canonical form.
func (t Token) MarshalText() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; it accepts what Parse
// accepts.
func (t *Token) UnmarshalText(text []byte) error {
	p, err := Parse(string(text))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// SyntaxError describes text that Parse refused.
type SyntaxError struct {
	// Text is the input, cut to at most 64 bytes.
	Text string
	// Reason says what is wrong with it.
	Reason string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("fence: malformed token %q: %s", e.Text, e.Reason)
}

// Is reports whether target is ErrSyntax.
func (e *SyntaxError) Is(target error) bool { return target == ErrSyntax }

func syntaxErr(s, reason string) error {
	if len(s) > 64 {
		s = s[:64]
	}
	return &SyntaxError{Text: s, Reason: reason}
}

// Parse parses the canonical text form written by Token.String. It returns
// a *SyntaxError (matching ErrSyntax) for anything else, including a
// revision <= 0, a name ValidateName refuses, and non-canonical escapes
// such as "%41" for "A" or lower-case hex.
func Parse(s string) (Token, error) {
	if len(s) > MaxNameLen*3+21 {
		return Token{}, syntaxErr(s, "too long")
	}
	revText, enc, ok := strings.Cut(s, ":")
	if !ok {
		return Token{}, syntaxErr(s, `missing ":" between revision and lock name`)
	}
	if revText == "" {
		return Token{}, syntaxErr(s, "empty revision")
	}
	for i := 0; i < len(revText); i++ {
		if revText[i] < '0' || revText[i] > '9' {
			return Token{}, syntaxErr(s, "revision is not a decimal number")
		}
	}
	if revText[0] == '0' {
		return Token{}, syntaxErr(s, "revision is zero or has leading zeros")
	}
	rev, err := strconv.ParseInt(revText, 10, 64)
	if err != nil {
		return Token{}, syntaxErr(s, "revision out of range")
	}
	name, reason := unescape(enc)
	if reason != "" {
		return Token{}, syntaxErr(s, reason)
	}
	if err := ValidateName(name); err != nil {
		return Token{}, syntaxErr(s, "lock name: "+err.(*NameError).Reason)
	}
	return Token{Lock: name, Revision: rev}, nil
}

const upperHex = "0123456789ABCDEF"

// unreserved reports whether c is written as itself in the text form.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&15])
	}
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unescape decodes the canonical percent-encoding; it returns a reason when
// enc is not canonical.
func unescape(enc string) (string, string) {
	var b strings.Builder
	b.Grow(len(enc))
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != '%' {
			if !unreserved(c) {
				return "", fmt.Sprintf("byte %#02x in lock name must be percent-encoded", c)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(enc) {
			return "", "truncated percent escape"
		}
		hi, ok1 := unhex(enc[i+1])
		lo, ok2 := unhex(enc[i+2])
		if !ok1 || !ok2 {
			return "", "percent escape is not two upper-case hex digits"
		}
		d := hi<<4 | lo
		if unreserved(d) {
			return "", fmt.Sprintf("%q must not be percent-encoded", d)
		}
		b.WriteByte(d)
		i += 2
	}
	return b.String(), ""
}

// MaxTokens is the most tokens one context or request may carry: the
// locks of one lease.Set (lease.MaxSetSize is no larger).
const MaxTokens = 64

type ctxKey struct{}

// tokenList is what NewTokensContext stores for several tokens.
type tokenList []Token

// NewContext returns a copy of ctx that carries t alone, in place of any
// token or tokens ctx carried. Client-side propagation (the guard
// package's RoundTripper and gRPC interceptors) sends the token found this
// way.
func NewContext(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// NewTokensContext returns a copy of ctx that carries ts, the tokens of
// several locks (a lease.Set's Fences), in place of any token or tokens ctx
// carried. Client-side propagation sends them all with each request, and a
// resource picks the token of the lock it is bound to. With one token it
// is NewContext(ctx, ts[0]); with none it returns a copy of ctx that
// carries no token. ts is copied. It does not validate ts: ValidateTokens
// does, and the guard transports refuse to send a list it refuses.
func NewTokensContext(ctx context.Context, ts ...Token) context.Context {
	switch len(ts) {
	case 0:
		return context.WithValue(ctx, ctxKey{}, nil)
	case 1:
		return NewContext(ctx, ts[0])
	}
	return context.WithValue(ctx, ctxKey{}, tokenList(append([]Token(nil), ts...)))
}

// FromContext returns the token carried by ctx when it carries exactly
// one (NewContext, or NewTokensContext with one token). It reports false
// for a ctx that carries none, or several: use TokensFromContext or
// TokenFromContext for those.
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(ctxKey{}).(Token)
	return t, ok
}

// TokensFromContext returns a copy of the tokens carried by ctx, in the
// order given to NewTokensContext: one for NewContext, nil for none.
func TokensFromContext(ctx context.Context) []Token {
	switch v := ctx.Value(ctxKey{}).(type) {
	case Token:
		return []Token{v}
	case tokenList:
		return append([]Token(nil), v...)
	}
	return nil
}

// TokenFromContext returns the token of the lock called lock among the
// tokens carried by ctx (one or several), if any.
func TokenFromContext(ctx context.Context, lock string) (Token, bool) {
	switch v := ctx.Value(ctxKey{}).(type) {
	case Token:
		if v.Lock == lock {
			return v, true
		}
	case tokenList:
		for _, t := range v {
			if t.Lock == lock {
				return t, true
			}
		}
	}
	return Token{}, false
}

// ValidateTokens returns nil when ts can travel together as one request's
// tokens: 1 to MaxTokens valid tokens, no two for the same lock. Otherwise
// it returns an error matching ErrInvalid (two tokens of one lock are
// refused whatever their revisions: a resource could not tell which one
// the sender meant).
func ValidateTokens(ts []Token) error {
	switch {
	case len(ts) == 0:
		return fmt.Errorf("%w: no tokens", ErrInvalid)
	case len(ts) > MaxTokens:
		return fmt.Errorf("%w: %d tokens, more than %d", ErrInvalid, len(ts), MaxTokens)
	}
	for i, t := range ts {
		if err := t.Validate(); err != nil {
			return err
		}
		for _, u := range ts[:i] {
			if u.Lock == t.Lock {
				return fmt.Errorf("%w: two tokens for lock %q (revisions %d and %d)", ErrInvalid, t.Lock, u.Revision, t.Revision)
			}
		}
	}
	return nil
}
