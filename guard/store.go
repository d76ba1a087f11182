package guard

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// Store keeps the marks of resources: per resource, the highest token
// accepted. Implementations must be safe for concurrent use.
type Store interface {
	// Advance applies fence.Check(mark, t) to the resource's mark and,
	// when t passes, raises the mark to fence.Max(mark, t), as one atomic
	// step with respect to every other Advance of the resource through the
	// same store, in any process. It returns the mark after the step.
	//
	// When t is refused it returns the mark that refused it and the error
	// from fence.Check (matching fence.ErrStale, fence.ErrWrongLock or
	// fence.ErrInvalid), and the mark is unchanged. That error is the
	// caller's: a Guard names its resource in the *fence.RefusedError, so
	// return the fresh one of each fence.Check call, never a shared value. Any other error means
	// the store could not decide; the mark may or may not have advanced.
	Advance(ctx context.Context, resource string, t fence.Token) (fence.Token, error)
	// Mark returns the resource's mark. When none was accepted it
	// returns the zero Token and an error matching fence.ErrNoMark.
	Mark(ctx context.Context, resource string) (fence.Token, error)
}

// MemoryStore is a Store in process memory. Its marks are lost when the
// process exits, and each process has its own: use it only when one
// process serves a resource and a restart may forget the marks (a holder
// superseded before the restart could write once more after it). The zero
// MemoryStore is ready to use; it is safe for concurrent use.
type MemoryStore struct {
	mu    sync.Mutex
	marks map[string]fence.Token
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// Advance implements Store.
func (s *MemoryStore) Advance(_ context.Context, resource string, t fence.Token) (fence.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mark := s.marks[resource]
	if err := fence.Check(mark, t); err != nil {
		return mark, err
	}
	mark = fence.Max(mark, t)
	if s.marks == nil {
		s.marks = map[string]fence.Token{}
	}
	s.marks[resource] = mark
	return mark, nil
}

// Mark implements Store: it returns an error matching fence.ErrNoMark
// for a resource without a mark.
func (s *MemoryStore) Mark(_ context.Context, resource string) (fence.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mark, ok := s.marks[resource]
	if !ok {
		return fence.Token{}, noMark("guard", resource)
	}
	return mark, nil
}

// ResetMark implements Resetter: it sets the resource's mark to next if it
// is exactly old (the zero Token: no mark), and returns an error matching
// fence.ErrMarkChanged otherwise. Use Guard.ResetMark, which logs the
// reset and waits for the resource's in-flight write.
func (s *MemoryStore) ResetMark(_ context.Context, resource string, old, next fence.Token) error {
	if err := ValidateReset(resource, old, next); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mark := s.marks[resource]; mark != old {
		return fmt.Errorf("guard: mark of %q is %s, not %s: not reset: %w", resource, mark, old, fence.ErrMarkChanged)
	}
	if s.marks == nil {
		s.marks = map[string]fence.Token{}
	}
	s.marks[resource] = next
	return nil
}
