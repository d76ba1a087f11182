package lease_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ready fails before the lease ends when renewals stop being confirmed:
// over 20 partitions of a holder from etcd, the probe turned unready
// before Done closed every time, about minHeadroom ahead.
func TestReadyFailsBeforeDone(t *testing.T) {
	const (
		ttl         = time.Second
		minHeadroom = 300 * time.Millisecond
		trials      = 20
	)
	px := newProxied(t, lease.WithTTL(ttl))
	ctx := ctxT(t, 120*time.Second)
	var leads []time.Duration
	for i := range trials {
		l, err := px.c.Acquire(ctx, "ready")
		require.NoError(t, err, "trial %d", i)
		require.NoError(t, px.c.Ready(minHeadroom), "trial %d: renewals confirmed", i)
		px.p.Blackhole()
		notReady := make(chan time.Time, 1)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if px.c.Ready(minHeadroom) != nil {
					notReady <- time.Now()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		<-l.Done()
		ended := time.Now()
		close(stop)
		select {
		case at := <-notReady:
			leads = append(leads, ended.Sub(at))
		default:
			t.Fatalf("trial %d: the lease ended (%v) while Ready still said ready", i, l.Err())
		}
		px.p.Resume()
		px.p.ResetConns()
	}
	slices.Sort(leads)
	t.Logf("Ready failed before Done in %d of %d partitions; lead min %v, median %v, max %v (asked %v)",
		len(leads), trials, leads[0].Round(time.Millisecond), leads[len(leads)/2].Round(time.Millisecond),
		leads[len(leads)-1].Round(time.Millisecond), minHeadroom)
	assert.Greater(t, leads[0], time.Duration(0))
}

// The probe handler answers 200 while renewals are confirmed and 503 with
// the reason once the headroom falls below the minimum; bad input and a
// closed Client are not ready.
func TestProbeHandler(t *testing.T) {
	px := newProxied(t, lease.WithTTL(3*time.Second))
	ctx := ctxT(t, 30*time.Second)
	h := px.c.ProbeHandler(time.Second)
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	code, _ := probe()
	require.Equal(t, http.StatusOK, code, "nothing held: ready")
	_, ok := px.c.Headroom()
	require.False(t, ok, "no session yet")

	_, err := px.c.Acquire(ctx, "probe")
	require.NoError(t, err)
	d, ok := px.c.Headroom()
	require.True(t, ok)
	assert.Greater(t, d, time.Second)
	assert.LessOrEqual(t, d, 3*time.Second)
	code, _ = probe()
	require.Equal(t, http.StatusOK, code)

	px.p.Blackhole()
	require.Eventually(t, func() bool { c, _ := probe(); return c == http.StatusServiceUnavailable }, 5*time.Second, 5*time.Millisecond)
	_, body := probe()
	assert.Contains(t, body, "not ready")
	var nre *lease.NotReadyError
	if err := px.c.Ready(time.Second); assert.ErrorAs(t, err, &nre) {
		assert.Less(t, nre.Headroom, time.Second)
		assert.Equal(t, time.Second, nre.Min)
	}
	px.p.Resume()
	px.p.ResetConns()
	require.Eventually(t, func() bool { c, _ := probe(); return c == http.StatusOK }, 10*time.Second, 20*time.Millisecond)

	require.ErrorAs(t, px.c.Ready(-time.Second), &nre, "a negative minimum is refused")
	require.NoError(t, px.c.Close())
	require.ErrorIs(t, px.c.Ready(time.Second), lease.ErrClosed)
	code, body = probe()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "closed")
}

// The warning metrics: renewal round trips, the headroom gauge, and the
// count of waiting acquisitions, with no lock name in any label.
func TestWarningMetrics(t *testing.T) {
	px := newProxied(t, lease.WithTTL(time.Second))
	ctx := ctxT(t, 30*time.Second)
	value := func(name string) (float64, bool) {
		v, ok := promtest.Values(t, px.reg, name)[""]
		return v, ok
	}
	_, ok := value("fencekit_lease_headroom_seconds")
	assert.False(t, ok, "no session: no headroom sample")

	l, err := px.c.Acquire(ctx, "warn")
	require.NoError(t, err)
	other := newClient(t, px.direct, lease.WithMetrics(px.reg))
	got := make(chan error, 1)
	go func() {
		w, err := other.Acquire(ctx, "warn")
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { v, _ := value("fencekit_lease_waiting"); return v == 1 }, 5*time.Second, 5*time.Millisecond)
	// A renewal or two, every third of the TTL.
	require.Eventually(t, func() bool { v, _ := value("fencekit_lease_renew_seconds"); return v >= 2 }, 5*time.Second, 10*time.Millisecond)
	head, ok := value("fencekit_lease_headroom_seconds")
	require.True(t, ok)
	assert.Greater(t, head, 0.0)
	assert.LessOrEqual(t, head, 1.0)

	require.NoError(t, l.Release(ctx))
	require.NoError(t, <-got)
	v, _ := value("fencekit_lease_waiting")
	assert.Equal(t, 0.0, v)

	fams, err := px.reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				assert.False(t, strings.Contains(lp.GetValue(), "warn"), "%s has the lock name in a label", f.GetName())
			}
		}
	}
}
