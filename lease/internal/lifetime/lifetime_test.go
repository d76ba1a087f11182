package lifetime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The first cause wins; Done and the Context end with it, not before.
func TestEnd(t *testing.T) {
	var e End
	e.Init()
	assert.NoError(t, e.Err())
	first, second := errors.New("first"), errors.New("second")
	assert.True(t, e.Begin(first))
	assert.False(t, e.End(second), "only the first ends it")
	assert.Equal(t, first, e.Err(), "the cause is set before Done closes")
	select {
	case <-e.Done():
		t.Fatal("done before Finish")
	default:
	}
	e.Finish()
	<-e.Done()
	assert.Equal(t, first, context.Cause(e.Context()))
}

// Stop cancels the group's Context and waits for its goroutines; a Sleep
// ends with it.
func TestGroup(t *testing.T) {
	g := NewGroup()
	var ran atomic.Bool
	g.Spawn(func() {
		<-g.Context().Done()
		ran.Store(true)
	})
	assert.True(t, g.Sleep(time.Millisecond))
	g.Stop()
	assert.True(t, ran.Load(), "Stop waited for the goroutine")
	assert.False(t, g.Sleep(time.Hour))
}
