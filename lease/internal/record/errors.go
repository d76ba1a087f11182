package record

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The lease package's sentinels for conditions found here; lease exports
// them under the same names.
var (
	// ErrMismatch is lease.ErrMismatch.
	ErrMismatch = errors.New("lease: lock used with another kind or size")
	// ErrPermissionDenied is lease.ErrPermissionDenied.
	ErrPermissionDenied = errors.New("lease: permission denied")
)

// RPCError returns err, an etcd request's, matching ErrPermissionDenied as
// well when etcd refused it for lack of permission or authentication.
func RPCError(err error) error {
	if err == nil || errors.Is(err, ErrPermissionDenied) {
		return err
	}
	denied := errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) ||
		errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrUserEmpty)
	if code, ok := ErrCode(err); ok && (code == codes.PermissionDenied || code == codes.Unauthenticated) {
		denied = true
	}
	if denied {
		return fmt.Errorf("%w: %w", ErrPermissionDenied, err)
	}
	return err
}

// ErrCode returns the gRPC code of an etcd error, whether the client
// returned it as an rpctypes.EtcdError or as a gRPC status.
func ErrCode(err error) (codes.Code, bool) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code(), true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code(), true
	}
	return codes.Unknown, false
}
