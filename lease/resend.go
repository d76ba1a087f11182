package lease

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/lease/internal/resend"
)

// errNoReply is the cause of a try that etcd did not answer within its
// deadline (see resend.Pacer).
var errNoReply = errors.New("lease: no reply from etcd")

// renewed notes the round trip d of a confirmed session renewal: in the
// moving average that sets renewals' deadlines, and in the metrics.
func (c *Client) renewed(d time.Duration) {
	resend.ObserveLatency(&c.lat.renew, d)
	c.met.Renew.Observe(d.Seconds())
}

// again reports whether to send another try of a call paced by r (see
// resend.Pacer): not once ctx has ended, the Client or its etcd client is
// closed, or the time for tries is up.
func (c *Client) again(ctx context.Context, r *resend.Pacer) bool {
	return !c.etcdClosed() && r.Again(ctx, c.bg.Context())
}
