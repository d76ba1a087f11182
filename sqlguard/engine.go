package sqlguard

import (
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// engine is a Guard's operations on a backend.Querier. Its methods are the
// one implementation of each operation: the Guard's own methods run them
// on database/sql handles, and package pgxguard on pgx's (see Engine).
type engine struct{ *Guard }

// Engine returns g's operations on fencekit's internal driver seam, for
// package pgxguard, which runs them on pgx with g's configuration,
// metrics, logger, tracer and verified tokens. It is not for other
// callers: the handles its methods take are of types internal to the
// fencekit module, which no other package can make.
func (g *Guard) Engine() backend.Engine[RowUpdate, RowUpsert, Mark] { return engine{g} }
