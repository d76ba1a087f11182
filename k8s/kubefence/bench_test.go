package kubefence_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/k8s/kubefence"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkUpdate measures what the policy adds to an Update: each
// iteration updates a fenced config map (stamped, in a namespace the
// binding selects) and an unfenced one (in a namespace it does not), in
// alternating order, on the same server. It reports the p50 and p99 of
// each and their ratios (fenced / unfenced). Its control runs the same
// writes with neither namespace selected: the stamped object's ratio
// without the policy, which is the noise floor of the comparison.
//
//	go test -run '^$' -bench BenchmarkUpdate -benchtime 1000x ./kubefence
func BenchmarkUpdate(b *testing.B) {
	b.Run("policy", func(b *testing.B) { benchUpdate(b, "fenced") })
	b.Run("control", func(b *testing.B) { benchUpdate(b, "unselected") })
}

// benchUpdate runs BenchmarkUpdate with the stamped object's namespace
// labelled label (the policy's binding selects "fenced").
func benchUpdate(b *testing.B, label string) {
	admin := adminClient(b)
	cs := userClient(b, writerUser)
	ctx := term(b.Context(), 9)
	fns, pns := "bench-"+label, "bench-plain-"+label
	fenced := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: fns}}
	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: pns}}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: fns, Labels: map[string]string{fencedLabel: label}}},
		{ObjectMeta: metav1.ObjectMeta{Name: pns}},
	} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		require.NoError(b, err)
	}
	require.NoError(b, kubefence.StampContext(ctx, fenced))
	fenced, err := cs.CoreV1().ConfigMaps(fns).Create(ctx, fenced, metav1.CreateOptions{})
	require.NoError(b, err)
	plain, err = cs.CoreV1().ConfigMaps(pns).Create(ctx, plain, metav1.CreateOptions{})
	require.NoError(b, err)

	var tf, tp []time.Duration
	i := 0
	b.ResetTimer()
	for b.Loop() {
		i++
		v := map[string]string{"v": strconv.Itoa(i)}
		doFenced := func() {
			fenced.Data = v
			start := time.Now()
			fenced, err = update(ctx, cs, fenced)
			tf = append(tf, time.Since(start))
			require.NoError(b, err)
		}
		doPlain := func() {
			plain.Data = v
			start := time.Now()
			plain, err = cs.CoreV1().ConfigMaps(pns).Update(ctx, plain, metav1.UpdateOptions{})
			tp = append(tp, time.Since(start))
			require.NoError(b, err)
		}
		if i%2 == 0 {
			doFenced()
			doPlain()
		} else {
			doPlain()
			doFenced()
		}
	}
	b.StopTimer()
	f50, f99 := percentiles(tf)
	p50, p99 := percentiles(tp)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(f50), "fenced-p50-ms")
	b.ReportMetric(ms(f99), "fenced-p99-ms")
	b.ReportMetric(ms(p50), "unfenced-p50-ms")
	b.ReportMetric(ms(p99), "unfenced-p99-ms")
	b.ReportMetric(float64(f50)/float64(p50), "p50-ratio")
	b.ReportMetric(float64(f99)/float64(p99), "p99-ratio")
	b.Logf("%d updates each: fenced p50 %v p99 %v; unfenced p50 %v p99 %v; ratio p50 %.2f p99 %.2f; policy enforced %v after Install",
		len(tf), f50, f99, p50, p99, float64(f50)/float64(p50), float64(f99)/float64(p99), enforcedAfter)
}

// percentiles returns the 50th and 99th percentiles of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99)/100]
}
