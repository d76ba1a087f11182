package sqlguard

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// engine is a *Guard as a backend.Engine: the entry points of package
// pgxguard, which run the same statements on pgx.
type engine struct{ g *Guard }

func init() {
	backend.EngineOf = func(g any) backend.Engine { return engine{g.(*Guard)} }
}

func (e engine) Fence(ctx context.Context, q backend.Querier, tok fence.Token, resources ...string) error {
	return e.g.fenceOp(ctx, q, tok, resources...)
}

func (e engine) Claim(ctx context.Context, begin backend.Begin, tok fence.Token, resources ...string) error {
	return e.g.claim(ctx, begin, tok, resources...)
}

func (e engine) RunTx(ctx context.Context, begin backend.Begin, tok fence.Token, resources []string,
	fn func(context.Context, backend.Tx) error) error {
	return e.g.runTxOp(ctx, begin, tok, resources, fn)
}

func (e engine) Update(ctx context.Context, q backend.Querier, tok fence.Token, u any) (int64, error) {
	ru, ok := u.(RowUpdate)
	if !ok {
		return 0, fmt.Errorf("%w: update: %T is not a RowUpdate", ErrInvalid, u)
	}
	return e.g.updateOp(ctx, q, tok, ru)
}

func (e engine) Upsert(ctx context.Context, q backend.Querier, tok fence.Token, u any) error {
	ru, ok := u.(RowUpsert)
	if !ok {
		return fmt.Errorf("%w: upsert: %T is not a RowUpsert", ErrInvalid, u)
	}
	return e.g.upsertOp(ctx, q, tok, ru)
}

func (e engine) Record(ctx context.Context, q backend.Querier, requestID string) error {
	return e.g.recordOp(ctx, q, requestID)
}

func (e engine) Recorded(ctx context.Context, q backend.Querier, requestID string) (bool, error) {
	return e.g.recorded(ctx, q, requestID)
}

func (e engine) Mark(ctx context.Context, q backend.Querier, resource string) (any, error) {
	return e.g.mark(ctx, q, resource)
}

func (e engine) Migrate(ctx context.Context, q backend.Querier) error { return e.g.migrate(ctx, q) }

func (e engine) CheckSchema(ctx context.Context, q backend.Querier) error {
	return e.g.checkSchema(ctx, q)
}

func (e engine) CheckColumn(ctx context.Context, q backend.Querier, table, column string) error {
	return e.g.checkColumn(ctx, q, table, column)
}

func (e engine) ResetMark(ctx context.Context, q backend.Querier, resource string, old, next fence.Token) error {
	return e.g.resetMark(ctx, q, resource, old, next)
}

func (e engine) Bind(ctx context.Context, q backend.Querier, resource, lock string) error {
	return e.g.bind(ctx, q, resource, lock)
}
