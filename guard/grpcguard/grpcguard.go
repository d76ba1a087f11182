package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetadataKey is the gRPC metadata key that carries a fencing token, with
// the same value as guard.Header: the token's text form, for example
// "42:orders". A call that writes under several locks at once (a
// lease.Set) carries one value per token, and the server also accepts
// the comma-separated lists of guard.Header (see guard.TokensFromValues).
const MetadataKey = "fencing-token"

// ErrorDomain is the Domain of the google.rpc.ErrorInfo detail of the
// interceptors' refusals. Its value predates this package and is kept so
// that clients matching it keep working.
const ErrorDomain = "github.com/fencekit/fencekit/guard"

// rpcAnswer is how the interceptors answer one outcome: a status code,
// and the Reason of the ErrorInfo detail ("" for none).
type rpcAnswer struct {
	code   codes.Code
	reason string
}

// rpcAnswers is the one table of the interceptors' refusals, by outcome.
// Stale and wrong-lock tokens get codes.Aborted: its official description
// names "a sequencer check failure", and it tells the client to retry at
// a higher level, that is, to acquire the lock again, not to resend. A
// mark ahead of the lock service gets codes.FailedPrecondition: the
// system is not in a state to accept the current holder until an
// operator resets the mark.
var rpcAnswers = [...]rpcAnswer{
	fence.Stale:      {codes.Aborted, "STALE_FENCING_TOKEN"},
	fence.WrongLock:  {codes.Aborted, "WRONG_LOCK_FENCING_TOKEN"},
	fence.MarkAhead:  {codes.FailedPrecondition, "FENCING_MARK_AHEAD"},
	fence.Unverified: {codes.PermissionDenied, "UNVERIFIED_FENCING_TOKEN"},
	fence.Missing:    {codes.InvalidArgument, "MISSING_FENCING_TOKEN"},
	fence.Malformed:  {codes.InvalidArgument, "MALFORMED_FENCING_TOKEN"},
	fence.Failed:     {codes.Unavailable, ""},
}

func answer(o fence.Outcome) rpcAnswer {
	if int(o) < len(rpcAnswers) {
		return rpcAnswers[o]
	}
	return rpcAnswer{}
}

// Code returns the status code with which the server interceptors refuse
// a call whose outcome is o: codes.Aborted for fence.Stale and
// fence.WrongLock, codes.FailedPrecondition for fence.MarkAhead,
// codes.PermissionDenied for fence.Unverified, codes.InvalidArgument for
// fence.Missing and fence.Malformed, and codes.Unavailable for
// fence.Failed (except that a call whose own context ended gets
// codes.Canceled or codes.DeadlineExceeded, and an invalid Target
// codes.Internal). It returns codes.OK for fence.Accepted.
func Code(o fence.Outcome) codes.Code { return answer(o).code }

// Reason returns the Reason of the ErrorInfo detail (Domain ErrorDomain)
// of a refusal with outcome o: "STALE_FENCING_TOKEN",
// "WRONG_LOCK_FENCING_TOKEN", "FENCING_MARK_AHEAD",
// "UNVERIFIED_FENCING_TOKEN", "MISSING_FENCING_TOKEN" or
// "MALFORMED_FENCING_TOKEN"; "" for fence.Accepted and fence.Failed,
// whose statuses carry no detail. The detail's metadata holds "outcome"
// (o's word), "resource", "lock", and when known "token" (text form),
// "token_revision" and "mark_revision".
func Reason(o fence.Outcome) string { return answer(o).reason }

// RouteFunc maps a gRPC call to the Target it writes. req is the
// request message of a unary call and nil for a stream. It returns false
// for a call that is not fenced, which runs unchecked.
type RouteFunc func(ctx context.Context, fullMethod string, req any) (guard.Target, bool)

// UnaryServerInterceptor returns a gRPC server interceptor that fences
// with g the calls route maps to a Target, with the rule of
// guard.Guard.Middleware: it reads the token from MetadataKey (of several,
// the Target's lock's: guard.TokenForLock) and runs the handler through g
// (guard.Guard.Serve), with that token in its context.
// Refusals are status errors carrying an ErrorInfo detail, with the code
// and reason of the refusal's fence.Outcome (see Code and Reason): stale
// or wrong lock gives codes.Aborted, a mark ahead of the lock service
// codes.FailedPrecondition, an unverified token codes.PermissionDenied, a
// missing or malformed token codes.InvalidArgument, a store or verifier
// failure (guard.ErrUnavailable: one that failed, or gave no answer within
// the Guard's check budget, which ends before the call's deadline)
// codes.Unavailable, and a call whose own context ended first
// codes.Canceled or codes.DeadlineExceeded.
// Calls route declines run unchecked, with a valid token, if sent, in
// their context.
//
// It panics if g or route is nil, so that it chains inline
// (grpc.ChainUnaryInterceptor) and misuse shows at start-up.
func UnaryServerInterceptor(g *guard.Guard, route RouteFunc) grpc.UnaryServerInterceptor {
	mustServe(g, route)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		tgt, ok := route(ctx, info.FullMethod, req)
		var resp any
		err := serveRPC(ctx, g, tgt, ok, func(ctx context.Context) error {
			var herr error
			resp, herr = handler(ctx, req)
			return herr
		})
		return resp, err
	}
}

// mustServe panics on the misuse of a server interceptor constructor.
func mustServe(g *guard.Guard, route RouteFunc) {
	if g == nil {
		panic("grpcguard: nil guard")
	}
	if route == nil {
		panic("grpcguard: nil route func")
	}
}

// StreamServerInterceptor is the streaming form of UnaryServerInterceptor.
// The token is checked once, when the stream starts, and the resource is
// held until the handler returns: a long stream keeps other writers of
// the resource waiting. It panics if g or route is nil.
func StreamServerInterceptor(g *guard.Guard, route RouteFunc) grpc.StreamServerInterceptor {
	mustServe(g, route)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		tgt, ok := route(ss.Context(), info.FullMethod, nil)
		return serveRPC(ss.Context(), g, tgt, ok, func(ctx context.Context) error {
			return handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
		})
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

func serveRPC(ctx context.Context, g *guard.Guard, tgt guard.Target, fenced bool, handle func(context.Context) error) error {
	md, _ := metadata.FromIncomingContext(ctx)
	ts, err := TokensFromMetadata(md)
	if !fenced {
		if err == nil {
			ctx = fence.NewTokensContext(ctx, ts...)
		}
		return handle(ctx)
	}
	t := guard.TokenForLock(ts, tgt.Lock)
	ran, err := g.Serve(ctx, tgt, t, err, handle)
	if ran {
		return err
	}
	return rpcStatus(tgt, t, err)
}

// rpcStatus turns a refusal of t for tgt into a status error.
func rpcStatus(tgt guard.Target, t fence.Token, err error) error {
	switch {
	case errors.Is(err, guard.ErrInvalidTarget):
		return status.Error(codes.Internal, "guard: invalid target")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if !errors.Is(err, guard.ErrUnavailable) {
			// The call's own context ended (cancelled, or its deadline
			// passed while waiting for the resource).
			return status.FromContextError(err).Err()
		}
	}
	o := fence.OutcomeOf(err)
	a := answer(o)
	if a.reason == "" {
		return status.Error(codes.Unavailable, err.Error())
	}
	info := &errdetails.ErrorInfo{Domain: ErrorDomain, Reason: a.reason, Metadata: map[string]string{
		"outcome":  o.String(),
		"resource": tgt.Resource,
		"lock":     tgt.Lock,
	}}
	if !t.IsZero() {
		info.Metadata["token"] = t.String()
		info.Metadata["token_revision"] = strconv.FormatInt(t.Revision, 10)
	}
	var r *fence.RefusedError
	if errors.As(err, &r) && !r.Mark.IsZero() {
		info.Metadata["mark_revision"] = strconv.FormatInt(r.Mark.Revision, 10)
	}
	msg := err.Error()
	if o == fence.Missing {
		msg += fmt.Sprintf(": send it as gRPC metadata %q", MetadataKey)
	}
	st, derr := status.New(a.code, msg).WithDetails(info)
	if derr != nil {
		return status.Error(a.code, msg)
	}
	return st.Err()
}

// TokenFromMetadata returns the token carried by md under MetadataKey. It
// returns a *fence.RefusedError with Outcome fence.Missing when md has
// none, and one with Outcome fence.Malformed when it has more than one or
// its value is not a valid token.
func TokenFromMetadata(md metadata.MD) (fence.Token, error) {
	return guard.TokenFromValues(md.Get(MetadataKey))
}

// TokensFromMetadata returns the tokens carried by md under MetadataKey,
// as guard.TokensFromValues reads them: one or several values, each a
// token or a comma-separated list of tokens.
func TokensFromMetadata(md metadata.MD) ([]fence.Token, error) {
	return guard.TokensFromValues(md.Get(MetadataKey))
}

// UnaryClientInterceptor returns a gRPC client interceptor that sends the
// fencing tokens found in each call's context (fence.TokensFromContext) as
// MetadataKey, one value per token, replacing any value already there: a
// call carrying one token sends exactly one value, its text form. Calls
// without a token are sent unchanged; a call whose context carries an
// invalid token, two tokens of one lock or more than fence.MaxTokens fails
// with an error matching fence.ErrInvalid (fence.ValidateTokens) and is
// not sent.
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
	ts := fence.TokensFromContext(ctx)
	if ts == nil {
		return ctx, nil
	}
	if err := fence.ValidateTokens(ts); err != nil {
		return ctx, fmt.Errorf("grpcguard: token in call context: %w", err)
	}
	vals := make([]string, len(ts))
	for i, t := range ts {
		vals[i] = t.String()
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if ok {
		md = md.Copy()
	} else {
		md = metadata.MD{}
	}
	md.Set(MetadataKey, vals...)
	return metadata.NewOutgoingContext(ctx, md), nil
}
