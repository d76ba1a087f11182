package grpcguard_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/grpcguard"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A hand-written gRPC service, so the test needs no generated code:
// unary Put(StringValue{"<resource>"}) and client-streaming Append, both
// fenced by lock "items". Append writes resource "log".
const (
	putMethod    = "/fencekit.guardtest.Items/Put"
	appendMethod = "/fencekit.guardtest.Items/Append"
	peekMethod   = "/fencekit.guardtest.Items/Peek"
)

type itemsRPC struct {
	mu      sync.Mutex
	applied map[string][]fence.Token
	peeked  []fence.Token
}

func (s *itemsRPC) record(ctx context.Context, resource string) {
	t, _ := fence.FromContext(ctx)
	s.mu.Lock()
	s.applied[resource] = append(s.applied[resource], t)
	s.mu.Unlock()
}

func (s *itemsRPC) appliedTo(resource string) []fence.Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.applied[resource])
}

var itemsDesc = grpc.ServiceDesc{
	ServiceName: "fencekit.guardtest.Items",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Put", Handler: unaryHandler(putMethod, func(s *itemsRPC, ctx context.Context, in *wrapperspb.StringValue) {
			s.record(ctx, in.Value)
		})},
		{MethodName: "Peek", Handler: unaryHandler(peekMethod, func(s *itemsRPC, ctx context.Context, _ *wrapperspb.StringValue) {
			t, _ := fence.FromContext(ctx)
			s.mu.Lock()
			s.peeked = append(s.peeked, t)
			s.mu.Unlock()
		})},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Append",
		ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			s := srv.(*itemsRPC)
			for {
				var in wrapperspb.StringValue
				err := stream.RecvMsg(&in)
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				s.record(stream.Context(), "log")
			}
			return stream.SendMsg(&wrapperspb.StringValue{Value: "ok"})
		},
	}},
}

func unaryHandler(method string, f func(*itemsRPC, context.Context, *wrapperspb.StringValue)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			f(srv.(*itemsRPC), ctx, req.(*wrapperspb.StringValue))
			return &wrapperspb.StringValue{Value: "ok"}, nil
		}
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

func rpcRoute(_ context.Context, method string, req any) (guard.Target, bool) {
	switch method {
	case putMethod:
		return guard.Target{Resource: req.(*wrapperspb.StringValue).Value, Lock: "items"}, true
	case appendMethod:
		return guard.Target{Resource: "log", Lock: "items"}, true
	}
	return guard.Target{}, false
}

// startRPC serves the Items service, fenced by g, on a loopback listener
// and returns a client connection with the client interceptors.
func startRPC(t *testing.T, g *guard.Guard) (*itemsRPC, *grpc.ClientConn) {
	t.Helper()
	unary := grpcguard.UnaryServerInterceptor(g, rpcRoute)
	stream := grpcguard.StreamServerInterceptor(g, rpcRoute)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	impl := &itemsRPC{applied: map[string][]fence.Token{}}
	srv.RegisterService(&itemsDesc, impl)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcguard.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(grpcguard.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-served
	})
	return impl, conn
}

func put(ctx context.Context, conn *grpc.ClientConn, resource string) error {
	return conn.Invoke(ctx, putMethod, wrapperspb.String(resource), new(wrapperspb.StringValue))
}

func appendStream(ctx context.Context, conn *grpc.ClientConn, n int) error {
	cs, err := conn.NewStream(ctx, &itemsDesc.Streams[0], appendMethod)
	if err != nil {
		return err
	}
	for range n {
		if err := cs.SendMsg(wrapperspb.String("x")); err != nil && err != io.EOF {
			return err
		}
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	return cs.RecvMsg(new(wrapperspb.StringValue))
}

// withRawToken sends md values as given, without the client interceptor's
// help (the context carries no fence token).
func withRawToken(ctx context.Context, values ...string) context.Context {
	for _, v := range values {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcguard.MetadataKey, v)
	}
	return ctx
}

func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

func TestGRPCRule(t *testing.T) {
	impl, conn := startRPC(t, newGuard(t))
	bg := context.Background()
	withTok := func(rev int64, lock string) context.Context { return fence.NewContext(bg, tok(lock, rev)) }
	steps := []struct {
		name   string
		ctx    context.Context
		code   codes.Code
		reason string
		mark   string
	}{
		{"first", withTok(5, "items"), codes.OK, "", ""},
		{"newer", withTok(9, "items"), codes.OK, "", ""},
		{"equal", withTok(9, "items"), codes.OK, "", ""},
		{"older", withTok(7, "items"), codes.Aborted, grpcguard.Reason(fence.Stale), "9"},
		{"wrong lock, higher", withTok(500, "payments"), codes.Aborted, grpcguard.Reason(fence.WrongLock), ""},
		{"missing", bg, codes.InvalidArgument, grpcguard.Reason(fence.Missing), ""},
		{"malformed", withRawToken(bg, "nine:items"), codes.InvalidArgument, grpcguard.Reason(fence.Malformed), ""},
		{"revision zero", withRawToken(bg, "0:items"), codes.InvalidArgument, grpcguard.Reason(fence.Malformed), ""},
		{"negative revision", withRawToken(bg, "-9:items"), codes.InvalidArgument, grpcguard.Reason(fence.Malformed), ""},
		{"two tokens", withRawToken(bg, "9:items", "10:items"), codes.InvalidArgument, grpcguard.Reason(fence.Malformed), ""},
		{"raw equal", withRawToken(bg, "9:items"), codes.OK, "", ""},
	}
	var want []fence.Token
	for _, st := range steps {
		err := put(st.ctx, conn, "item/1")
		if got := status.Code(err); got != st.code {
			t.Errorf("%s: code %v (%v), want %v", st.name, got, err, st.code)
			continue
		}
		if st.code == codes.OK {
			tk, ok := fence.FromContext(st.ctx)
			if !ok {
				tk = tok("items", 9)
			}
			want = append(want, tk)
			continue
		}
		info := errorInfo(err)
		if info == nil || info.Reason != st.reason || info.Domain != grpcguard.ErrorDomain || info.Metadata["resource"] != "item/1" || info.Metadata["mark_revision"] != st.mark {
			t.Errorf("%s: ErrorInfo %v, want reason %s, resource item/1, mark_revision %q", st.name, info, st.reason, st.mark)
		}
	}
	if got := impl.appliedTo("item/1"); !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v", got, want)
	}

	// A client-side invalid token is never sent.
	if err := put(withTok(0, "items"), conn, "item/1"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Invoke with revision 0 in ctx: %v, want ErrInvalid", err)
	}
	if err := appendStream(withTok(-1, "items"), conn, 1); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewStream with revision -1 in ctx: %v, want ErrInvalid", err)
	}
	// The context's token replaces metadata set by hand.
	if err := put(withRawToken(withTok(9, "items"), "1:items"), conn, "item/1"); err != nil {
		t.Errorf("Put with token 9 in ctx and 1 in metadata: %v", err)
	}
}

func TestGRPCStream(t *testing.T) {
	impl, conn := startRPC(t, newGuard(t))
	bg := context.Background()
	if err := appendStream(fence.NewContext(bg, tok("items", 30)), conn, 3); err != nil {
		t.Fatalf("Append with token 30: %v", err)
	}
	err := appendStream(fence.NewContext(bg, tok("items", 29)), conn, 2)
	if status.Code(err) != codes.Aborted || errorInfo(err).GetReason() != grpcguard.Reason(fence.Stale) {
		t.Errorf("Append with stale token 29: %v, want Aborted/%s", err, grpcguard.Reason(fence.Stale))
	}
	err = appendStream(fence.NewContext(bg, tok("jobs", 31)), conn, 2)
	if status.Code(err) != codes.Aborted || errorInfo(err).GetReason() != grpcguard.Reason(fence.WrongLock) {
		t.Errorf("Append with wrong-lock token: %v, want Aborted/%s", err, grpcguard.Reason(fence.WrongLock))
	}
	if err := appendStream(bg, conn, 1); status.Code(err) != codes.InvalidArgument || errorInfo(err).GetReason() != grpcguard.Reason(fence.Missing) {
		t.Errorf("Append without token: %v, want InvalidArgument/%s", err, grpcguard.Reason(fence.Missing))
	}
	if err := appendStream(withRawToken(bg, "x"), conn, 1); status.Code(err) != codes.InvalidArgument || errorInfo(err).GetReason() != grpcguard.Reason(fence.Malformed) {
		t.Errorf("Append with malformed token: %v, want InvalidArgument/%s", err, grpcguard.Reason(fence.Malformed))
	}
	if err := appendStream(fence.NewContext(bg, tok("items", 30)), conn, 1); err != nil {
		t.Errorf("Append with equal token 30: %v", err)
	}
	want := []fence.Token{tok("items", 30), tok("items", 30), tok("items", 30), tok("items", 30)}
	if got := impl.appliedTo("log"); !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v", got, want)
	}
}

// TestGRPCUnfenced: a call the route declines runs without a token, and
// still sees one that was sent.
func TestGRPCUnfenced(t *testing.T) {
	impl, conn := startRPC(t, newGuard(t))
	bg := context.Background()
	peek := func(ctx context.Context) error {
		return conn.Invoke(ctx, peekMethod, wrapperspb.String(""), new(wrapperspb.StringValue))
	}
	if err := peek(bg); err != nil {
		t.Errorf("Peek without token: %v", err)
	}
	if err := peek(fence.NewContext(bg, tok("items", 3))); err != nil {
		t.Errorf("Peek with token: %v", err)
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	if want := []fence.Token{{}, tok("items", 3)}; !slices.Equal(impl.peeked, want) {
		t.Errorf("Peek saw %v, want %v", impl.peeked, want)
	}
}

func tok(lock string, rev int64) fence.Token { return fence.Token{Lock: lock, Revision: rev} }

func newGuard(t *testing.T, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(guard.NewMemoryStore(), opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	return g
}

// TestInterceptorsPanicOnMisuse: a nil guard or route is a programming
// error, reported when the interceptor is made, not on every call.
func TestInterceptorsPanicOnMisuse(t *testing.T) {
	g := newGuard(t)
	for name, f := range map[string]func(){
		"UnaryServerInterceptor(g, nil)":      func() { grpcguard.UnaryServerInterceptor(g, nil) },
		"StreamServerInterceptor(g, nil)":     func() { grpcguard.StreamServerInterceptor(g, nil) },
		"UnaryServerInterceptor(nil, route)":  func() { grpcguard.UnaryServerInterceptor(nil, rpcRoute) },
		"StreamServerInterceptor(nil, route)": func() { grpcguard.StreamServerInterceptor(nil, rpcRoute) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

// TestGRPCUnverified: with a verifier on a real etcd, a token newer than
// the mark that is not the holder's is PermissionDenied with reason
// UNVERIFIED_FENCING_TOKEN, the handler does not run, and the holder's
// calls pass.
func TestGRPCUnverified(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	locks, err := lease.New(etcdtest.Client(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	holder, err := locks.Acquire(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, guard.WithVerifier(locks.Verifier()))
	svc, conn := startRPC(t, g)
	if err := put(fence.NewContext(ctx, holder.Fence()), conn, "item/1"); err != nil {
		t.Fatalf("holder: %v", err)
	}
	forged := tok("items", holder.Fence().Revision+1000)
	err = put(fence.NewContext(ctx, forged), conn, "item/1")
	info := errorInfo(err)
	if status.Code(err) != grpcguard.Code(fence.Unverified) || info.GetReason() != grpcguard.Reason(fence.Unverified) ||
		info.GetMetadata()["mark_revision"] != strconv.FormatInt(holder.Fence().Revision, 10) {
		t.Errorf("forged token: %v (%v), want PermissionDenied/%s", err, info, grpcguard.Reason(fence.Unverified))
	}
	if err := put(fence.NewContext(ctx, holder.Fence()), conn, "item/1"); err != nil {
		t.Errorf("holder after the forgery: %v", err)
	}
	if got := svc.appliedTo("item/1"); !slices.Equal(got, []fence.Token{holder.Fence(), holder.Fence()}) {
		t.Errorf("applied %v, want the holder's two calls", got)
	}
}

// TestGRPCMarkAhead: the current holder refused by a mark from elsewhere
// (here written straight into the store, as an earlier etcd cluster's
// holder would have) is FailedPrecondition with reason FENCING_MARK_AHEAD,
// not a retryable Aborted.
func TestGRPCMarkAhead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locks, err := lease.New(etcdtest.Client(t, etcdtest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	holder, err := locks.Acquire(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	store := guard.NewMemoryStore()
	old := tok("items", holder.Fence().Revision+1000)
	if _, err := store.Advance(ctx, "item/1", old); err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(store, guard.WithVerifier(locks.Verifier()))
	if err != nil {
		t.Fatal(err)
	}
	_, conn := startRPC(t, g)
	err = put(fence.NewContext(ctx, holder.Fence()), conn, "item/1")
	info := errorInfo(err)
	if status.Code(err) != grpcguard.Code(fence.MarkAhead) || info.GetReason() != grpcguard.Reason(fence.MarkAhead) ||
		info.GetMetadata()["mark_revision"] != strconv.FormatInt(old.Revision, 10) {
		t.Errorf("holder against a mark ahead: %v (%v), want FailedPrecondition/%s", err, info, grpcguard.Reason(fence.MarkAhead))
	}
	if err := g.ResetMark(ctx, "item/1", old, holder.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := put(fence.NewContext(ctx, holder.Fence()), conn, "item/1"); err != nil {
		t.Errorf("holder after ResetMark: %v", err)
	}
}

// TestGRPCVerifierEtcdStopped: with etcd stopped, a call whose token needs
// verification is refused with codes.Unavailable before the caller's own
// deadline passes (not DeadlineExceeded: the verifier failed, the caller's
// time did not run out), the handler does not run and the mark stays; the
// holder's calls, equal to the mark, need no etcd and pass.
func TestGRPCVerifierEtcdStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	locks, err := lease.New(etcdtest.Client(t, c))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := locks.Acquire(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := lease.NewVerifier(etcdtest.Client(t, c), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, guard.WithVerifier(verifier))
	svc, conn := startRPC(t, g)
	if err := put(fence.NewContext(ctx, holder.Fence()), conn, "item/1"); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	locks.Close()
	for _, m := range c.Members { // every member: etcd is down
		m.Stop()
	}

	newer := tok("items", holder.Fence().Revision+1)
	for _, deadline := range []time.Duration{time.Second, 300 * time.Millisecond} {
		cctx, ccancel := context.WithTimeout(fence.NewContext(ctx, newer), deadline)
		start := time.Now()
		err = put(cctx, conn, "item/1")
		took := time.Since(start)
		ccancel()
		if status.Code(err) != codes.Unavailable || took >= deadline {
			t.Errorf("call bounded to %v, etcd stopped: %v after %v, want Unavailable before the deadline", deadline, err, took)
		}
	}
	// The caller's own cancellation is still Canceled.
	cctx, ccancel := context.WithCancel(fence.NewContext(ctx, newer))
	time.AfterFunc(100*time.Millisecond, ccancel)
	if err := put(cctx, conn, "item/1"); status.Code(err) != codes.Canceled {
		t.Errorf("call cancelled by its caller: %v, want Canceled", err)
	}
	if err := put(fence.NewContext(ctx, holder.Fence()), conn, "item/1"); err != nil {
		t.Errorf("holder, equal to the mark, etcd stopped: %v", err)
	}
	if got := svc.appliedTo("item/1"); !slices.Equal(got, []fence.Token{holder.Fence(), holder.Fence()}) {
		t.Errorf("applied %v, want the holder's two calls", got)
	}
	if mark, err := g.Mark(ctx, "item/1"); err != nil || mark != holder.Fence() {
		t.Errorf("mark = %v, %v; want the holder's", mark, err)
	}
}
