package objguard_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/objguard"
)

// BenchmarkS3 is the cost of fencing object writes against versitygw,
// the two arms of each comparison interleaved in one process on clients
// of their own: each round runs a block of one arm, then a block of the
// other, the order alternating (A B, B A, ...). It prints, per case, each
// arm's p50 and p99 over all rounds, the ratio of those p50s, and the
// median of the per-round ratios of the p50s with their spread (min–max).
//
//   - put-1KiB, put-1MiB: a holder writing the same object again (steady
//     state: the Guard remembers the version it wrote, so one conditional
//     PUT) against a plain PUT. Target <= 1.15x.
//   - first-1KiB: a fenced Put of a new object (a HEAD, then a PUT with
//     If-None-Match: *) against a plain PUT of a new object. Target <= 2.2x.
//   - delete: a fenced Delete of an object the Guard wrote (a tombstone
//     PUT on the remembered version) against a plain DELETE. Target <= 2.2x.
//   - delete-cold: a fenced Delete of an object the Guard did not write
//     (a HEAD, then the tombstone PUT) against a plain DELETE.
//   - purge: Purge of an object the Guard wrote (a DELETE with If-Match on
//     the remembered version) against a plain DELETE.
//
// Run with -run '^$' -bench S3 -benchtime=1x; FENCEKIT_BENCH_ROUNDS sets
// the rounds (default 12).
func BenchmarkS3(b *testing.B) {
	rounds := 12
	if v := os.Getenv("FENCEKIT_BENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		rounds = n
	}
	s := startStore(b)
	ctx := context.Background()
	plain := newClient(b, s.srv.Endpoint)
	g, err := objguard.New(ctx, newClient(b, s.srv.Endpoint), s.bucket)
	if err != nil {
		b.Fatal(err)
	}
	tok := fence.Token{Lock: "bench", Revision: 42}
	put := func(key string, body []byte) error {
		_, err := plain.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key,
			Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
		return err
	}
	del := func(key string) error {
		_, err := plain.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
		return err
	}
	n := 0
	fresh := func() string { n++; return "bench/" + strconv.Itoa(n) }
	kib, mib := bytes.Repeat([]byte("k"), 1<<10), bytes.Repeat([]byte("m"), 1<<20)
	cases := []struct {
		name         string
		ops          int
		fenced, base func(key string) error
		setF, setB   func(key string) error // untimed, before each op
	}{
		{name: "put-1KiB", ops: 30,
			fenced: func(string) error { _, err := g.Put(ctx, "bench/steady-f", tok, kib); return err },
			base:   func(string) error { return put("bench/steady-p", kib) }},
		{name: "put-1MiB", ops: 16,
			fenced: func(string) error { _, err := g.Put(ctx, "bench/steady-fm", tok, mib); return err },
			base:   func(string) error { return put("bench/steady-pm", mib) }},
		{name: "first-1KiB", ops: 30,
			fenced: func(k string) error { _, err := g.Put(ctx, k, tok, kib); return err },
			base:   func(k string) error { return put(k, kib) }},
		{name: "delete", ops: 30,
			setF:   func(k string) error { _, err := g.Put(ctx, k, tok, kib); return err },
			fenced: func(k string) error { return g.Delete(ctx, k, tok) },
			setB:   func(k string) error { return put(k, kib) },
			base:   del},
		{name: "delete-cold", ops: 30,
			setF:   func(k string) error { return put(k, kib) },
			fenced: func(k string) error { return g.Delete(ctx, k, tok) },
			setB:   func(k string) error { return put(k, kib) },
			base:   del},
		{name: "purge", ops: 30,
			setF:   func(k string) error { _, err := g.Put(ctx, k, tok, kib); return err },
			fenced: func(k string) error { return g.Purge(ctx, k, tok) },
			setB:   func(k string) error { return put(k, kib) },
			base:   del},
	}
	fmt.Printf("%-11s %9s %9s %9s %9s %7s %7s %13s\n", "case", "fenced50", "fenced99", "plain50", "plain99", "p50/p50", "rounds", "min–max")
	for _, c := range cases {
		var fAll, bAll []time.Duration
		var ratios []float64
		block := func(op, setup func(string) error) []time.Duration {
			ds := make([]time.Duration, 0, c.ops)
			for range c.ops {
				k := fresh()
				if setup != nil {
					if err := setup(k); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				if err := op(k); err != nil {
					b.Fatalf("%s: %v", c.name, err)
				}
				ds = append(ds, time.Since(start))
			}
			return ds
		}
		block(c.fenced, c.setF) // warm up both arms
		block(c.base, c.setB)
		for r := range rounds {
			var f, p []time.Duration
			if r%2 == 0 {
				f, p = block(c.fenced, c.setF), block(c.base, c.setB)
			} else {
				p, f = block(c.base, c.setB), block(c.fenced, c.setF)
			}
			fAll, bAll = append(fAll, f...), append(bAll, p...)
			ratios = append(ratios, float64(pct(f, 50))/float64(pct(p, 50)))
		}
		slices.Sort(ratios)
		fmt.Printf("%-11s %9s %9s %9s %9s %6.2fx %6.2fx %6.2f–%.2fx\n", c.name, ms(pct(fAll, 50)), ms(pct(fAll, 99)),
			ms(pct(bAll, 50)), ms(pct(bAll, 99)), float64(pct(fAll, 50))/float64(pct(bAll, 50)),
			ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
	}
}

// pct returns the p-th percentile of ds.
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// ms formats d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
