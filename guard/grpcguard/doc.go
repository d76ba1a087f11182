// Package grpcguard provides the gRPC transport of package guard: server
// interceptors that fence calls with a guard.Guard, and client
// interceptors that send the fencing token of a call's context as one
// metadata key, [MetadataKey] ("fencing-token").
//
// It is a package of its own so that programs using only guard's HTTP
// middleware do not link gRPC.
//
// # Answers
//
// The server interceptors apply guard's rule (see package guard) and
// refuse with status errors carrying a google.rpc.ErrorInfo detail whose
// Domain is [ErrorDomain], whose Reason and whose metadata's "outcome"
// name the refusal's fence.Outcome. One table maps outcomes to codes
// ([Code], [Reason]): a stale or wrong-lock token is codes.Aborted; the
// current holder's token refused by a mark ahead of the lock service
// (fence.MarkAhead) is codes.FailedPrecondition: an operator must reset
// the mark; a token a verifier did not confirm (guard.WithVerifier) is
// codes.PermissionDenied; a missing or malformed token
// codes.InvalidArgument; a store or verifier
// failure codes.Unavailable, safe to retry: one that failed, or gave no
// answer within the Guard's check budget (guard.WithCheckTimeout, default
// 5 s, cut to nine tenths of the time left before the call's deadline, so
// that the answer reaches the caller before its deadline passes). Only a
// call whose own context ended (cancelled by the caller, or its deadline
// passed while waiting for the resource) gets codes.Canceled or
// codes.DeadlineExceeded. The handler runs only for an
// accepted token, with the token in its context (fence.FromContext).
//
// # What it does not do
//
// It checks the token once per call, when a stream starts; a long stream
// holds its resource until the handler returns. It does not authenticate
// the caller: without a verifier any client able to send metadata can
// raise a mark.
//
// # Tracing
//
// The server interceptors decide through guard.Guard.Serve, so a Guard
// made with guard.WithTracerProvider records a "fencekit.guard.serve" span
// for each fenced call, a child of the call's span (otelgrpc's, when the
// server uses its stats handler); there is no option here. Calls route
// declines are not decisions and get no span.
package grpcguard
