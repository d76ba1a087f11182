package guard

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

const (
	// Header is the HTTP request header that carries a fencing token, in
	// its text form (fence.Token.String): the decimal revision, ":", and
	// the percent-encoded lock name, for example "Fencing-Token: 42:orders".
	// A request that writes under several locks at once (a lease.Set)
	// carries one token per lock as a comma-separated list, in one line or
	// several: "Fencing-Token: 42:accounts-1,42:accounts-2" (see
	// TokensFromValues). Package grpcguard's MetadataKey carries the same
	// values in gRPC metadata.
	Header = "Fencing-Token"
)

// TokenFromHeader returns the token carried by h. It returns a
// *fence.RefusedError with Outcome fence.Missing (matching
// fence.ErrMissing) when h has no Header, and one with Outcome
// fence.Malformed (matching fence.ErrInvalid) when it has more than one or
// its value is not a valid token.
func TokenFromHeader(h http.Header) (fence.Token, error) {
	return TokenFromValues(h.Values(Header))
}

// TokenFromValues returns the token carried by the values of one header
// line or metadata key of a request, for transports other than HTTP
// (package grpcguard uses it): a *fence.RefusedError with Outcome
// fence.Missing for no value, and one with Outcome fence.Malformed (whose
// Err is the reason) for several or for a value that is not a valid token.
// Its Resource is empty: Serve names the Target. A request that may
// carry a lease.Set's tokens is read with TokensFromValues instead: here a
// list of several is malformed.
func TokenFromValues(vs []string) (fence.Token, error) {
	switch len(vs) {
	case 0:
		return fence.Token{}, &fence.RefusedError{Outcome: fence.Missing}
	case 1:
	default:
		return fence.Token{}, &fence.RefusedError{Outcome: fence.Malformed,
			Err: fmt.Errorf("guard: %d tokens in one request", len(vs))}
	}
	t, err := fence.Parse(vs[0])
	if err != nil {
		return fence.Token{}, &fence.RefusedError{Outcome: fence.Malformed, Err: err}
	}
	return t, nil
}

// TokensFromHeader returns the tokens carried by h's Header lines: see
// TokensFromValues.
func TokensFromHeader(h http.Header) ([]fence.Token, error) {
	return TokensFromValues(h.Values(Header))
}

// TokensFromValues returns the tokens carried by the values of one header
// or metadata key of a request that may write under several locks at once
// (the Middleware and package grpcguard's interceptors read requests with
// it). Each value is a comma-separated list of tokens in their text form,
// with optional spaces or tabs around each element; several values are
// one list, in order, as HTTP joins repeated header lines. A single token
// is a list of one, so the value of a one-token request is exactly
// TokenFromValues' value.
//
// It returns a *fence.RefusedError with Outcome fence.Missing for no
// value, and one with Outcome fence.Malformed (matching fence.ErrInvalid,
// its Err the reason) when an element is empty or not a valid token, when
// two elements are tokens of the same lock (whatever their revisions:
// which one the sender meant cannot be told, so the request is refused
// rather than guessed at), or when there are more than fence.MaxTokens.
// Its Resource is empty: Serve names the Target.
func TokensFromValues(vs []string) ([]fence.Token, error) {
	one, many, err := readTokens(vs)
	switch {
	case err != nil:
		return nil, err
	case many != nil:
		return many, nil
	}
	return []fence.Token{one}, nil
}

// readTokens is TokensFromValues, with a request of one token (the common
// case) read without building a list: it returns that token alone, or the
// list of several.
func readTokens(vs []string) (one fence.Token, many []fence.Token, err error) {
	switch {
	case len(vs) == 0:
		return fence.Token{}, nil, &fence.RefusedError{Outcome: fence.Missing}
	case len(vs) == 1 && !strings.Contains(vs[0], ","):
		t, err := fence.Parse(strings.Trim(vs[0], " \t"))
		if err != nil {
			return fence.Token{}, nil, malformed(err)
		}
		return t, nil, nil
	}
	var ts []fence.Token
	for _, v := range vs {
		for elem := range strings.SplitSeq(v, ",") {
			if len(ts) == fence.MaxTokens {
				return fence.Token{}, nil, malformed(fmt.Errorf("guard: more than %d tokens in one request", fence.MaxTokens))
			}
			t, err := fence.Parse(strings.Trim(elem, " \t"))
			if err != nil {
				return fence.Token{}, nil, malformed(err)
			}
			ts = append(ts, t)
		}
	}
	if err := fence.ValidateTokens(ts); err != nil {
		return fence.Token{}, nil, malformed(err)
	}
	return fence.Token{}, ts, nil
}

func malformed(err error) error {
	return &fence.RefusedError{Outcome: fence.Malformed, Err: err}
}

// TokenForLock returns the token of ts that names lock: the one a resource
// bound to lock checks. When none does it returns ts[0], which the Guard
// refuses as fence.WrongLock, and the zero Token for an empty ts.
func TokenForLock(ts []fence.Token, lock string) fence.Token {
	for _, t := range ts {
		if t.Lock == lock {
			return t
		}
	}
	if len(ts) == 0 {
		return fence.Token{}
	}
	return ts[0]
}

// Transport is an http.RoundTripper that sends the fencing tokens found in
// each request's context as the Header, replacing any value already set:
// the token of fence.NewContext alone, exactly as "Fencing-Token:
// 42:orders", and the tokens of fence.NewTokensContext (a lease.Set's) as
// one line listing them, comma-separated, in their order (see
// TokensFromValues). Requests whose context carries no token are sent
// unchanged. A request whose context carries an invalid token, two tokens
// of one lock or more than fence.MaxTokens is not sent: RoundTrip returns
// an error matching fence.ErrInvalid (fence.ValidateTokens).
//
// A Transport is safe for concurrent use if Base is.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// HeaderValue returns the value of Header that carries ts: one token's
// text form, or the comma-separated list of several. It returns an error
// matching fence.ErrInvalid when fence.ValidateTokens refuses ts.
func HeaderValue(ts ...fence.Token) (string, error) {
	if err := fence.ValidateTokens(ts); err != nil {
		return "", err
	}
	if len(ts) == 1 {
		return ts[0].String(), nil
	}
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.String())
	}
	return b.String(), nil
}

func (t *Transport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ts := fence.TokensFromContext(req.Context())
	if ts == nil {
		return t.base().RoundTrip(req)
	}
	v, err := HeaderValue(ts...)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("guard: token in request context: %w", err)
	}
	r2 := req.Clone(req.Context())
	r2.Header.Set(Header, v)
	return t.base().RoundTrip(r2)
}

// CloseIdleConnections closes the idle connections of Base, when it has
// such a method.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
