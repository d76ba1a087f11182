package sqlguard

import (
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// engine is a Guard's operations on a backend.Querier. Its methods are the
// one implementation of each operation: the Guard's own methods run them
// on database/sql handles, and package pgxguard on pgx's (see Engine).
type engine struct{ *Guard }

// Engine returns g's operations on fencekit's internal driver seam: it is
// how package pgxguard runs g's statements, with g's metrics, logger,
// tracer and verifier, on pgx. Its result's type is internal to the
// fencekit module, so no other package can use it.
func (g *Guard) Engine() backend.Engine[RowUpdate, RowUpsert, Mark] { return engine{g} }
