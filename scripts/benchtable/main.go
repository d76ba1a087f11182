// Command benchtable reads `go test -bench` output of fencekit's
// comparison benchmarks (integration/bench_test.go) on stdin and writes the
// markdown tables of docs/performance.md: the interleaved timings, the
// ratios with their spread and the performance targets with a met/MISSED
// verdict, and the other figures (loss signalling, many locks).
// scripts/bench.sh writes them to BENCHMARKS.md, from which a run's rows
// are copied into docs/performance.md.
//
// It understands two kinds of line:
//
//   - Interleaved benchmarks, named <Benchmark>/<param>, report per arm X
//     "X-ms/op" and "X-cpu-ms/op", per compared pair A/B "ratio:A/B" and
//     "cpuratio:A/B" with "-min" and "-max" variants, and "rounds" and
//     "ops/block".
//   - Other benchmarks, named <Benchmark>/<impl>/<param>, report plain
//     units (ms/signal, early_pct, heapB/lock, …).
//
// When the input holds several runs of a benchmark (-count), figures and
// ratios are the median over runs, "-min" the smallest and "-max" the
// largest.
//
// Usage:
//
//	go run ./scripts/benchtable -machine "2 cores" -cmd "scripts/bench.sh" < bench.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// benchLine matches one result line: name without the GOMAXPROCS suffix,
// then the iteration count and the value/unit pairs.
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// row is one benchmark case.
type row struct{ bench, param string }

// results holds every value of every metric per row, in input order.
// Metrics of <Benchmark>/<impl>/<param> lines are stored as "<impl>-<unit>",
// as interleaved benchmarks name theirs.
type results struct {
	rows        []row
	vals        map[row]map[string][]float64
	interleaved map[row]bool
}

func main() {
	machine := flag.String("machine", "", "machine description for the header")
	cmd := flag.String("cmd", "scripts/bench.sh", "command that produced the input")
	flag.Parse()
	res, err := parse(os.Stdin)
	if err != nil {
		log.Fatal(err)
	}
	if len(res.rows) == 0 {
		log.Fatal("benchtable: no benchmark lines on stdin")
	}
	write(os.Stdout, res, *machine, *cmd)
}

// parse collects the benchmark lines of r.
func parse(r io.Reader) (*results, error) {
	res := &results{vals: map[row]map[string][]float64{}, interleaved: map[row]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		parts := strings.Split(m[1], "/")
		var rw row
		impl := ""
		switch len(parts) {
		case 1: // a benchmark with no sub-benchmarks: one row
			rw = row{parts[0], "—"}
		case 2:
			rw = row{parts[0], parts[1]}
		case 3:
			rw, impl = row{parts[0], parts[2]}, parts[1]
		default:
			continue
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			if impl != "" {
				unit = impl + "-" + unit
			}
			if unit == "rounds" {
				res.interleaved[rw] = true
			}
			if res.vals[rw] == nil {
				res.vals[rw] = map[string][]float64{}
				res.rows = append(res.rows, rw)
			}
			res.vals[rw][unit] = append(res.vals[rw][unit], v)
		}
	}
	slices.SortStableFunc(res.rows, func(a, b row) int { return benchRank(a.bench) - benchRank(b.bench) })
	return res, sc.Err()
}

// benchOrder is the order of benchmarks in the tables; others follow.
var benchOrder = []string{"Cycle", "Fanout", "Handoff", "Reenter", "Election", "Transfer", "Observe", "AcquireAll", "AcquireAllContended", "Guard", "Redis", "LossSignal", "ManyLocks", "ManyHolders", "RevokeStorm", "CrashTakeover", "MassExpiry"}

func benchRank(bench string) int {
	if i := slices.Index(benchOrder, bench); i >= 0 {
		return i
	}
	return len(benchOrder)
}

// get combines the values of one metric over runs: the minimum for a
// "-min" metric, the maximum for a "-max" one, else the median.
func (res *results) get(rw row, unit string) (float64, bool) {
	xs := res.vals[rw][unit]
	if len(xs) == 0 {
		return 0, false
	}
	switch {
	case strings.HasSuffix(unit, "-min"):
		return slices.Min(xs), true
	case strings.HasSuffix(unit, "-max"):
		return slices.Max(xs), true
	}
	return median(xs)
}

func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// arms lists the arms of an interleaved row: fencekit, etcdmutex, then the
// others (the reference) in name order.
func (res *results) arms(rw row) []string {
	var out []string
	for u := range res.vals[rw] {
		if strings.HasSuffix(u, "-ms/op") && !strings.HasSuffix(u, "-cpu-ms/op") {
			out = append(out, strings.TrimSuffix(u, "-ms/op"))
		}
	}
	rank := func(a string) int {
		switch a {
		case "fencekit":
			return 0
		case "etcdmutex":
			return 1
		}
		return 2
	}
	slices.SortFunc(out, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}

// ratios lists the A/B pairs of an interleaved row in name order.
func (res *results) ratios(rw row) []string {
	var out []string
	for u := range res.vals[rw] {
		if p, ok := strings.CutPrefix(u, "ratio:"); ok && !strings.HasSuffix(p, "-min") && !strings.HasSuffix(p, "-max") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// showMs formats a duration given in milliseconds.
func showMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.2f ms", v)
	case v >= 0.001:
		return fmt.Sprintf("%.1f µs", v*1e3)
	}
	return fmt.Sprintf("%.0f ns", v*1e6)
}

func showRatio(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.1fx", v)
	}
	return fmt.Sprintf("%.2fx", v)
}

// show formats a figure with 4 significant digits, whole numbers up to a
// billion without an exponent.
func show(v float64) string {
	if math.Abs(v) >= 1e4 && math.Abs(v) < 1e9 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func write(w io.Writer, res *results, machine, cmd string) {
	fmt.Fprintf(w, "`%s`", cmd)
	if machine != "" {
		fmt.Fprintf(w, " on %s", machine)
	}
	fmt.Fprintln(w, "; embedded etcd, one member, fsync on, in the test process; every client on its own connection.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Method: the implementations of a row run in one process, in alternating blocks "+
		"(A B C, B C A, C A B, …) of a fixed number of operations over several rounds, after one "+
		"untimed warm-up block each, so drift hits all alike. Times are medians over rounds of wall "+
		"time per operation; CPU is the whole process's (etcd and every client) per operation. "+
		"A ratio is the median of the per-round ratios, with their min–max over rounds; verdicts "+
		"judge the median.")
	fmt.Fprintln(w)
	writeTimings(w, res)
	fmt.Fprintln(w)
	writeRatios(w, res)
	if other := writeOthers(io.Discard, res); other > 0 {
		fmt.Fprintln(w)
		writeOthers(w, res)
	}
}

func writeTimings(w io.Writer, res *results) {
	fmt.Fprintln(w, "| benchmark | param | rounds × ops | fencekit | etcdmutex | reference | CPU fencekit | CPU etcdmutex | CPU reference |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, rw := range res.rows {
		if !res.interleaved[rw] {
			continue
		}
		rounds, _ := res.get(rw, "rounds")
		ops, _ := res.get(rw, "ops/block")
		wall := map[string]string{}
		cpu := map[string]string{}
		for _, a := range res.arms(rw) {
			cell := func(unit string) string {
				v, _ := res.get(rw, a+unit)
				s := showMs(v)
				if a != "fencekit" && a != "etcdmutex" {
					s = a + ": " + s
				}
				return s
			}
			if a == "fencekit" || a == "etcdmutex" {
				wall[a], cpu[a] = cell("-ms/op"), cell("-cpu-ms/op")
				continue
			}
			wall["ref"] += sep(wall["ref"]) + cell("-ms/op")
			cpu["ref"] += sep(cpu["ref"]) + cell("-cpu-ms/op")
		}
		fmt.Fprintf(w, "| %s | %s | %.0f × %.0f | %s | %s | %s | %s | %s | %s |\n", rw.bench, rw.param, rounds, ops,
			wall["fencekit"], wall["etcdmutex"], wall["ref"], cpu["fencekit"], cpu["etcdmutex"], cpu["ref"])
	}
}

func sep(s string) string {
	if s == "" {
		return ""
	}
	return "; "
}

func writeRatios(w io.Writer, res *results) {
	fmt.Fprintln(w, "| benchmark | param | ratio | time (min–max) | CPU (min–max) | target | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, rw := range res.rows {
		if !res.interleaved[rw] {
			continue
		}
		for _, pair := range res.ratios(rw) {
			spread := func(kind string) string {
				v, ok := res.get(rw, kind+":"+pair)
				if !ok {
					return ""
				}
				lo, _ := res.get(rw, kind+":"+pair+"-min")
				hi, _ := res.get(rw, kind+":"+pair+"-max")
				return fmt.Sprintf("%s (%s–%s)", showRatio(v), showRatio(lo), showRatio(hi))
			}
			text, verdict := ratioTarget(res, rw, pair)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", rw.bench, rw.param, pair, spread("ratio"), spread("cpuratio"), text, verdict)
		}
	}
}

// verdict words a target check: met or MISSED; a median that meets the
// target while the worst round does not says so.
func verdict(pass, worstPasses bool) string {
	switch {
	case pass && worstPasses:
		return "met"
	case pass:
		return "met (median; not every round)"
	}
	return "**MISSED**"
}

// p99Verdict words the p99 part of a two-part target.
func p99Verdict(pass bool) string { return partVerdict("p99", pass) }

// partVerdict words one more part of a target of several parts.
func partVerdict(part string, pass bool) string {
	if pass {
		return "; " + part + " met"
	}
	return "; " + part + " **MISSED**"
}

// ratioTarget returns the target for the ratio pair of rw and its
// verdict, or empty strings when the pair has none.
func ratioTarget(res *results, rw row, pair string) (string, string) {
	v, _ := res.get(rw, "ratio:"+pair)
	lo, _ := res.get(rw, "ratio:"+pair+"-min")
	hi, _ := res.get(rw, "ratio:"+pair+"-max")
	// A median that rounds to the limit is shown in full, so that the
	// verdict can be checked against it.
	exact := func(limit float64) string {
		if showRatio(v) != showRatio(limit) {
			return ""
		}
		return fmt.Sprintf(" (median %.3fx)", v)
	}
	atMost := func(limit float64) (string, string) {
		return "≤ " + showRatio(limit), verdict(v <= limit, hi <= limit) + exact(limit)
	}
	atLeast := func(limit float64) (string, string) {
		return "≥ " + showRatio(limit), verdict(v >= limit, lo >= limit) + exact(limit)
	}
	switch {
	case rw.bench == "Cycle" && pair == "fencekit/floor":
		return atMost(1.10)
	case rw.bench == "Cycle" && pair == "fencekit/etcdmutex":
		return atMost(1.05)
	case rw.bench == "Fanout" && rw.param == "N=256" && pair == "fencekit/fencekit@0":
		return atMost(1.25)
	case rw.bench == "Fanout" && rw.param == "N=256" && pair == "fencekit/etcdmutex":
		return atMost(1.25)
	case rw.bench == "ManyHolders" && pair == "busy/quiet":
		// Three targets: the cycle time with the others busy against
		// quiet, no event of another Client's lock, and heap per lock.
		foreign, _ := res.get(rw, "foreign-events")
		heap, _ := res.get(rw, "heapB/lock")
		locks, _ := res.get(rw, "locks/client")
		text, verdictText := atMost(1.25)
		return fmt.Sprintf("%s; no event of another Client's lock (%.0f); heap ≤ 1 KiB per held lock (%.0f B, %.0f locks per Client)", text, foreign, heap, locks),
			verdictText + partVerdict("events", foreign == 0) + partVerdict("heap", heap <= 1024)
	case rw.bench == "AcquireAllContended" && pair == "etcdmutex/fencekit":
		fk, _ := res.get(rw, "fencekit-p99-wait-ms")
		em, _ := res.get(rw, "etcdmutex-p99-wait-ms")
		return fmt.Sprintf("p99 wait %s against %s (no target)", showMs(fk), showMs(em)), ""
	case rw.bench == "Handoff" && pair == "fencekit/uncontended":
		return atMost(2)
	case rw.bench == "Handoff" && rw.param == "n=2" && pair == "etcdmutex/fencekit":
		return atLeast(20)
	case rw.bench == "AcquireAll" && rw.param == "k=8" && pair == "set/single":
		return atMost(1.3)
	case rw.bench == "AcquireAll" && pair == "sequential/set":
		k, err := strconv.Atoi(strings.TrimPrefix(rw.param, "k="))
		if err != nil {
			return "", ""
		}
		return atLeast(float64(k) / 1.5)
	case rw.bench == "Election" && pair == "fencekit/lock":
		return atMost(2)
	case rw.bench == "Transfer" && pair == "fencekit/uncontended":
		// Two targets: the median hand-off against an uncontended cycle,
		// and the 99th percentile hand-off in absolute terms.
		p99, _ := res.get(rw, "fencekit-p99-ms")
		text, verdictText := atMost(1.5)
		return fmt.Sprintf("%s; p99 ≤ 50 ms (p99 %s)", text, showMs(p99)), verdictText + p99Verdict(p99 <= 50)
	case rw.bench == "Observe" && pair == "fencekit/etcdelection":
		fk, _ := res.get(rw, "fencekit-ms/op")
		return "a change seen ≤ 5 ms after Proclaim (median)", verdict(fk <= 5, true)
	case rw.bench == "Guard" && rw.param == "http-verified" && pair == "fencekit/floor":
		fk, _ := res.get(rw, "fencekit-ms/op")
		floor, _ := res.get(rw, "floor-ms/op")
		added := fk - floor
		return fmt.Sprintf("verifier adds < 5 µs, token equal to the mark (adds %s)", showMs(added)), verdict(added < 0.005, true)
	case rw.bench == "Guard" && rw.param == "http" && pair == "fencekit/floor":
		fk, _ := res.get(rw, "fencekit-ms/op")
		floor, _ := res.get(rw, "floor-ms/op")
		added := fk - floor
		return fmt.Sprintf("adds < 5 µs (adds %s)", showMs(added)), verdict(added < 0.005, true)
	case rw.bench == "Redis" && strings.HasPrefix(rw.param, "set") && pair == "fencekit/floor":
		return atMost(1.3)
	case rw.bench == "Guard" && strings.HasSuffix(rw.param, "-rowcol") && pair == "fencekit/floor":
		return atMost(1.15)
	case rw.bench == "Guard" && strings.HasSuffix(rw.param, "-table") && pair == "fencekit/floor":
		return atMost(1.6)
	case rw.bench == "Guard" && strings.HasSuffix(rw.param, "-rowcol") && (pair == "fencekit-pgx/floor-pgx" || pair == "fencekit-pgxcache/floor-pgx"):
		return atMost(1.10)
	case rw.bench == "Guard" && strings.HasSuffix(rw.param, "-table") && (pair == "fencekit-pgx/floor-pgx" || pair == "fencekit-pgxcache/floor-pgx"):
		return atMost(1.5)
	}
	return "", ""
}

// otherUnits lists, per non-interleaved benchmark, the units shown and in
// which order.
var otherUnits = map[string][]string{
	"LossSignal":    {"ms/signal", "max-ms/signal", "early_pct", "margin_ms", "median-margin_ms"},
	"ManyLocks":     {"acquires/s", "heapB/lock", "keepalives/s", "watchers"},
	"RevokeStorm":   {"quiet-p99-ms", "death-p99-ms", "p99-ratio", "revoke-apply-ms"},
	"CrashTakeover": {"p50-ms", "p99-ms", "trials", "keepalives/s", "late-refused", "stale-writes"},
	"MassExpiry":    {"p50-ms", "p99-ms", "max-ms", "expired"},
}

// writeOthers writes the table of non-interleaved figures and returns its
// number of rows.
func writeOthers(w io.Writer, res *results) int {
	n := 0
	fmt.Fprintln(w, "| benchmark | param | metric | fencekit | etcdmutex | target | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, rw := range res.rows {
		if res.interleaved[rw] {
			continue
		}
		for _, unit := range otherUnits[rw.bench] {
			fk, hasFK := res.get(rw, "fencekit-"+unit)
			em, hasEM := res.get(rw, "etcdmutex-"+unit)
			if !hasFK && !hasEM {
				continue
			}
			cell := func(v float64, ok bool) string {
				if !ok {
					return ""
				}
				return show(v)
			}
			fkCell := cell(fk, hasFK)
			// A figure reported with its spread over rounds (unit-min,
			// unit-max) shows it.
			lo, hasLo := res.get(rw, "fencekit-"+unit+"-min")
			hi, hasHi := res.get(rw, "fencekit-"+unit+"-max")
			if hasFK && hasLo && hasHi {
				fkCell += fmt.Sprintf(" (%s–%s)", show(lo), show(hi))
			}
			text, verdict := otherTarget(rw, unit, fk, hasFK, hi, hasHi)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", rw.bench, rw.param, unit, fkCell, cell(em, hasEM), text, verdict)
			n++
		}
	}
	return n
}

// otherTarget returns the target of a non-interleaved figure and its
// verdict, or empty strings when it has none; hi is the figure's largest
// round, when it reports one.
func otherTarget(rw row, unit string, fk float64, hasFK bool, hi float64, hasHi bool) (string, string) {
	if !hasFK || math.IsNaN(fk) {
		return "", ""
	}
	check := func(pass bool, text string) (string, string) { return text, verdict(pass, true) }
	switch {
	case rw.bench == "LossSignal" && strings.HasPrefix(rw.param, "partition") && unit == "early_pct":
		return check(fk == 100, "Done before any other acquisition in 100% of trials")
	case rw.bench == "LossSignal" && (rw.param == "delete" || rw.param == "overwrite") && unit == "ms/signal":
		return check(fk <= 50, "≤ 50 ms (median)")
	case rw.bench == "ManyLocks" && unit == "heapB/lock":
		return check(fk <= 2048, "≤ 2 KiB per lock")
	case rw.bench == "ManyLocks" && unit == "keepalives/s":
		// A session per 1,000 records, renewed every TTL/3 (10 s).
		n, _ := strconv.Atoi(strings.TrimPrefix(rw.param, "n="))
		sessions := float64((n + 999) / 1000)
		return check(fk <= 0.35*sessions, "one per 1,000 locks per TTL/3 (≤ 0.35/s per 1,000 locks)")
	case rw.bench == "RevokeStorm" && unit == "p99-ratio":
		return "≤ 1.5x (median over rounds)", verdict(fk <= 1.5, !hasHi || hi <= 1.5)
	case rw.bench == "CrashTakeover" && unit == "p99-ms" && rw.param == "m=1,ttl=2s":
		return check(fk <= 2500, "≤ 2.5 s")
	case rw.bench == "CrashTakeover" && unit == "p99-ms" && rw.param == "m=3,ttl=2s":
		return check(fk <= 3500, "≤ 3.5 s")
	case rw.bench == "CrashTakeover" && unit == "stale-writes":
		return check(fk == 0, "0 stale writes accepted")
	}
	return "", ""
}
