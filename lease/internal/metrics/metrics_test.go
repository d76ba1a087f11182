package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Two Clients' collectors on one registry are one set of series, and a
// result counts under its op and outcome words.
func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := New("release"), New("release")
	require.NoError(t, a.Register(reg))
	require.NoError(t, b.Register(reg))
	a.Result("release", "done").Inc()
	b.Result("release", "done").Inc()
	b.Result("release", "not_owner").Inc()
	b.Result("renew", "done").Inc() // not cached: looked up
	assert.Equal(t, 2.0, testutil.ToFloat64(a.Results.WithLabelValues("release", "done")))
	assert.Equal(t, 1.0, testutil.ToFloat64(a.Results.WithLabelValues("release", "not_owner")))
	assert.Equal(t, 1.0, testutil.ToFloat64(a.Results.WithLabelValues("renew", "done")))
	a.Acquired(time.Second)
	assert.Equal(t, 1.0, testutil.ToFloat64(b.Succeeded))
}

type source struct {
	d  time.Duration
	ok bool
}

func (s *source) Headroom() (time.Duration, bool) { return s.d, s.ok }

// The headroom gauge is the least of its sources' headroom, and absent
// while none has any.
func TestHeadroom(t *testing.T) {
	h := newHeadroom()
	none := &source{}
	h.Add(none)
	assert.Equal(t, 0, testutil.CollectAndCount(h))
	h.Add(&source{d: 3 * time.Second, ok: true})
	h.Add(&source{d: 2 * time.Second, ok: true})
	assert.Equal(t, 2.0, testutil.ToFloat64(h))
	h.Remove(none)
	assert.Equal(t, 1, testutil.CollectAndCount(h))
}
