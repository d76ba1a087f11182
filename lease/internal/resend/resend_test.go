package resend

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A try's deadline is four times the recent reply time, within bounds,
// and grows by a quarter per try.
func TestDeadlines(t *testing.T) {
	var lat atomic.Int64
	assert.Equal(t, MinTryDeadline, New(time.Minute, &lat).Deadline(), "no reply seen yet")
	lat.Store(int64(100 * time.Millisecond))
	p := New(time.Minute, &lat)
	assert.Equal(t, 400*time.Millisecond, p.Deadline())
	assert.Equal(t, 500*time.Millisecond, p.Deadline())
	lat.Store(int64(time.Second))
	assert.Equal(t, maxTryDeadline, New(time.Minute, &lat).Deadline())
}

// The moving average takes the first reply whole, then an eighth of each.
func TestObserveLatency(t *testing.T) {
	var avg atomic.Int64
	ObserveLatency(&avg, 80*time.Millisecond)
	assert.EqualValues(t, 80*time.Millisecond, avg.Load())
	ObserveLatency(&avg, 160*time.Millisecond)
	assert.EqualValues(t, 90*time.Millisecond, avg.Load())
}

// Tries go on while ctx and stop live and the budget lasts; a try that
// failed fast is followed by a pause.
func TestAgain(t *testing.T) {
	var lat atomic.Int64
	bg := context.Background()
	p := New(time.Minute, &lat)
	p.Deadline()
	start := time.Now()
	assert.True(t, p.Again(bg, bg), "a try that failed fast, within the budget")
	assert.GreaterOrEqual(t, time.Since(start), 10*time.Millisecond, "paused first")

	ended, cancel := context.WithCancel(bg)
	cancel()
	assert.False(t, p.Again(ended, bg), "ctx ended")
	assert.False(t, p.Again(bg, ended), "stop ended")

	p = New(time.Millisecond, &lat)
	p.Deadline()
	time.Sleep(2 * time.Millisecond)
	assert.False(t, p.Again(bg, bg), "the time for tries is up")
}

func TestSleep(t *testing.T) {
	bg := context.Background()
	assert.True(t, Sleep(bg, nil, time.Millisecond))
	stop := make(chan struct{})
	close(stop)
	assert.False(t, Sleep(bg, stop, time.Hour))
	ended, cancel := context.WithCancel(bg)
	cancel()
	assert.False(t, Sleep(ended, nil, time.Hour))
}
