package guard

import (
	"fmt"
	"net/http"

	"github.com/fencekit/fencekit/fence"
)

const (
	// Header is the HTTP request header that carries a fencing token, in
	// its text form (fence.Token.String): the decimal revision, ":", and
	// the percent-encoded lock name, for example "Fencing-Token: 42:orders".
	// A request carries at most one. Package grpcguard's MetadataKey
	// carries the same value in gRPC metadata.
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
// Its Resource is empty: Serve names the Target.
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

// Transport is an http.RoundTripper that sends the fencing token found in
// each request's context (fence.FromContext) as the Header, replacing any
// value already set. Requests whose context carries no token are sent
// unchanged. A request whose context carries an invalid token is not sent:
// RoundTrip returns an error matching fence.ErrInvalid.
//
// A Transport is safe for concurrent use if Base is.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
}

func (t *Transport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, ok := fence.FromContext(req.Context())
	if !ok {
		return t.base().RoundTrip(req)
	}
	if err := tok.Validate(); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("guard: token in request context: %w", err)
	}
	r2 := req.Clone(req.Context())
	r2.Header.Set(Header, tok.String())
	return t.base().RoundTrip(r2)
}

// CloseIdleConnections closes the idle connections of Base, when it has
// such a method.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
