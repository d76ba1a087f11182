package kubefence_test

import (
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWebhook: the webhook admits the lock's current holder's token,
// refuses a forged higher one and one of another lock, and fails closed
// when it cannot reach etcd. It logs what it adds to an Update (p50, p99,
// interleaved with unfenced ones).
func TestWebhook(t *testing.T) {
	admin := adminClient(t)
	cs := userClient(t, writerUser)
	ctx := t.Context()

	etcd := etcdtest.Start(t)
	proxies := etcd.Proxies(t)
	verifier, err := lease.NewVerifier(etcd.ClientThrough(t, proxies...), lease.DefaultPrefix)
	require.NoError(t, err)
	holder, err := lease.New(etcd.Client(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	l, err := holder.Acquire(ctx, testLock)
	require.NoError(t, err)
	tok := l.Fence()

	srv := httptest.NewTLSServer(kubefence.NewWebhook(verifier, testLock))
	t.Cleanup(srv.Close)
	p := testPolicy
	p.Name = "fencekit.webhook"
	p.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{fencedLabel: "webhook"}}
	wh, err := kubefence.WebhookConfiguration(p, srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	require.NoError(t, err)
	_, err = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, wh, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, wh.Name, metav1.DeleteOptions{})
	})
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "webhook", Labels: map[string]string{fencedLabel: "webhook"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "webhook-plain"}},
	} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	cms := cs.CoreV1().ConfigMaps("webhook")

	forged := fence.Token{Lock: testLock, Revision: tok.Revision + 1000}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	require.NoError(t, kubefence.Stamp(cm, forged))
	require.Eventually(t, func() bool {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	}, 20*time.Second, 50*time.Millisecond, "webhook not called")
	r := refused(t, err, fence.ErrUnverified)
	assert.Equal(t, forged, r.Token)

	require.NoError(t, kubefence.Stamp(cm, tok))
	cm, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err, "the current holder's token")
	other := cm.DeepCopy()
	require.NoError(t, kubefence.Stamp(other, fence.Token{Lock: "payments", Revision: tok.Revision}))
	_, err = cms.Update(ctx, other, metav1.UpdateOptions{})
	refused(t, err, fence.ErrWrongLock)

	// Cut off from etcd, the webhook cannot verify: it refuses.
	cut := faults.Partition(proxies...)
	require.NoError(t, cut.Inject(ctx))
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fencekit: failed")
	var rerr *fence.RefusedError
	assert.False(t, errors.As(kubefence.Refusal(err), &rerr), "not verified is no refusal: %v", err)
	require.NoError(t, cut.Heal(ctx))

	// What the webhook adds to an Update (with the etcd round trip).
	plain, err := cs.CoreV1().ConfigMaps("webhook-plain").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var tw, tp []time.Duration
	for i := range 200 {
		v := map[string]string{"v": strconv.Itoa(i)}
		hooked := func() {
			cm.Data = v
			start := time.Now()
			cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			tw = append(tw, time.Since(start))
			require.NoError(t, err)
		}
		unhooked := func() {
			plain.Data = v
			start := time.Now()
			plain, err = cs.CoreV1().ConfigMaps("webhook-plain").Update(ctx, plain, metav1.UpdateOptions{})
			tp = append(tp, time.Since(start))
			require.NoError(t, err)
		}
		if i%2 == 0 {
			hooked()
			unhooked()
		} else {
			unhooked()
			hooked()
		}
	}
	w50, w99 := percentiles(tw)
	p50, p99 := percentiles(tp)
	t.Logf("200 updates each: webhook p50 %v p99 %v; unfenced p50 %v p99 %v; ratio p50 %.2f p99 %.2f",
		w50, w99, p50, p99, float64(w50)/float64(p50), float64(w99)/float64(p99))
	require.NoError(t, l.Release(ctx))
}
