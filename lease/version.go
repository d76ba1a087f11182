package lease

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/lease/internal/serverversion"
)

// MinServerVersion is the oldest etcd server version a Client works with.
// Acquire refuses members older than this with a *ServerVersionError.
const MinServerVersion = "3.5.0"

// ServerVersionError reports an etcd member older than MinServerVersion.
// It matches ErrServerTooOld.
type ServerVersionError struct {
	// Endpoint is the client URL of the member, as the etcd client knows
	// it.
	Endpoint string
	// Version is the server version the member reported.
	Version string
	// Floor is MinServerVersion.
	Floor string
}

func (e *ServerVersionError) Error() string {
	return fmt.Sprintf("lease: etcd server %s at %s is older than %s, the oldest supported", e.Version, e.Endpoint, e.Floor)
}

// Is reports whether target is ErrServerTooOld.
func (e *ServerVersionError) Is(target error) bool { return target == ErrServerTooOld }

// checkServers checks the versions of the members of c's etcd client not
// checked yet (see serverversion.Check) and returns a *ServerVersionError
// for the first older than MinServerVersion. c.sessions.grant is held.
func (c *Client) checkServers(ctx context.Context) error {
	old := serverversion.Check(ctx, c.etcd, c.sessions.checked, MinServerVersion, c.log)
	if old == nil {
		return nil
	}
	return &ServerVersionError{Endpoint: old.Endpoint, Version: old.Version, Floor: MinServerVersion}
}
