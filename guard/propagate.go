package guard

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fencekit/fencekit/fence"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

const (
	// Header is the HTTP request header that carries a fencing token, in
	// its text form (fence.Token.String): the decimal revision, ":", and
	// the percent-encoded lock name, for example "Fencing-Token: 42:orders".
	// A request carries at most one.
	Header = "Fencing-Token"
	// MetadataKey is the gRPC metadata key that carries a fencing token,
	// with the same value as Header. A request carries at most one.
	MetadataKey = "fencing-token"
)

// TokenFromHeader returns the token carried by h. It returns an error
// matching ErrMissing when h has no Header, and one matching ErrMalformed
// when it has more than one or its value is not a valid token.
func TokenFromHeader(h http.Header) (fence.Token, error) {
	return tokenFromValues(h.Values(Header))
}

// TokenFromMetadata returns the token carried by md, with the errors of
// TokenFromHeader.
func TokenFromMetadata(md metadata.MD) (fence.Token, error) {
	return tokenFromValues(md.Get(MetadataKey))
}

func tokenFromValues(vs []string) (fence.Token, error) {
	switch len(vs) {
	case 0:
		return fence.Token{}, ErrMissing
	case 1:
	default:
		return fence.Token{}, fmt.Errorf("%w: %d tokens in one request", ErrMalformed, len(vs))
	}
	t, err := fence.Parse(vs[0])
	if err != nil {
		return fence.Token{}, fmt.Errorf("%w: %w", ErrMalformed, err)
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

// UnaryClientInterceptor returns a gRPC client interceptor that sends the
// fencing token found in each call's context as MetadataKey, replacing any
// value already there. Calls without a token are sent unchanged; a call
// whose context carries an invalid token fails with an error matching
// fence.ErrInvalid and is not sent.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, err := outgoing(ctx)
		if err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is the streaming form of UnaryClientInterceptor.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, err := outgoing(ctx)
		if err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

func outgoing(ctx context.Context) (context.Context, error) {
	tok, ok := fence.FromContext(ctx)
	if !ok {
		return ctx, nil
	}
	if err := tok.Validate(); err != nil {
		return ctx, fmt.Errorf("guard: token in call context: %w", err)
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if ok {
		md = md.Copy()
	} else {
		md = metadata.MD{}
	}
	md.Set(MetadataKey, tok.String())
	return metadata.NewOutgoingContext(ctx, md), nil
}
