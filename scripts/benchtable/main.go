// Command benchtable reads `go test -bench` output of the fencekit
// comparison benchmarks (names <Benchmark>/<impl>/<param>) on stdin and
// writes a markdown table of medians, ratios and the performance targets.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

var line = regexp.MustCompile(`^Benchmark([^/\s]+)/([^/\s]+)/(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

type key struct{ bench, param, unit string }

func main() {
	machine := flag.String("machine", "", "machine description for the header")
	cmd := flag.String("cmd", "scripts/bench.sh", "command that produced the input")
	flag.Parse()
	vals, order, err := parse(os.Stdin)
	if err != nil {
		log.Fatal(err)
	}
	if len(order) == 0 {
		log.Fatal("benchtable: no benchmark lines on stdin")
	}
	write(os.Stdout, vals, order, *machine, *cmd)
}

// parse collects every value per (benchmark, param, unit) and impl.
func parse(r io.Reader) (map[key]map[string][]float64, []key, error) {
	vals := map[key]map[string][]float64{}
	var order []key
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		bench, impl, param := m[1], m[2], m[3]
		f := strings.Fields(m[5])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			k := key{bench, param, f[i+1]}
			if vals[k] == nil {
				vals[k] = map[string][]float64{}
				order = append(order, k)
			}
			vals[k][impl] = append(vals[k][impl], v)
		}
	}
	return vals, order, sc.Err()
}

func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// keep lists the units shown per benchmark; ns/op of benchmarks with a
// more telling metric is left out.
var keep = map[string][]string{
	"Cycle":      {"ns/op"},
	"Handoff":    {"ms/handoff"},
	"Reenter":    {"ns/op"},
	"LossSignal": {"ms/signal", "margin_ms", "early_pct"},
	"ManyLocks":  {"acquires/s", "heapB/lock", "keepalives/s"},
	"Guard":      {"ns/op"},
}

func show(v float64, unit string) string {
	switch {
	case unit == "ns/op" && v >= 1e6:
		return fmt.Sprintf("%.3f ms", v/1e6)
	case unit == "ns/op" && v >= 1e3:
		return fmt.Sprintf("%.1f µs", v/1e3)
	case unit == "ns/op":
		return fmt.Sprintf("%.0f ns", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64) + " " + unit
}

func write(w io.Writer, vals map[key]map[string][]float64, order []key, machine, cmd string) {
	med := func(k key, impl string) (float64, bool) { return median(vals[k][impl]) }
	fmt.Fprintf(w, "Medians of `%s`", cmd)
	if machine != "" {
		fmt.Fprintf(w, " on %s", machine)
	}
	fmt.Fprintln(w, "; embedded etcd v3.7.3, one member, fsync on, in the same run.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| benchmark | param | metric | fencekit | etcdmutex | floor | fencekit/floor | fencekit/etcdmutex | target |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	cycle, haveCycle := med(key{"Cycle", "uncontended", "ns/op"}, "fencekit")
	for _, k := range order {
		if !slices.Contains(keep[k.bench], k.unit) {
			continue
		}
		cells := []string{k.bench, k.param, k.unit}
		fk, hasFK := med(k, "fencekit")
		for _, impl := range []string{"fencekit", "etcdmutex", "floor"} {
			if v, ok := med(k, impl); ok {
				cells = append(cells, show(v, k.unit))
			} else {
				cells = append(cells, "")
			}
		}
		for _, impl := range []string{"floor", "etcdmutex"} {
			if v, ok := med(k, impl); ok && hasFK && v != 0 {
				cells = append(cells, fmt.Sprintf("%.2fx", fk/v))
			} else {
				cells = append(cells, "")
			}
		}
		cells = append(cells, target(k, med, cycle, haveCycle))
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
}

// target states the target for a row and whether this run met it.
func target(k key, med func(key, string) (float64, bool), cycle float64, haveCycle bool) string {
	fk, ok := med(k, "fencekit")
	if !ok {
		return ""
	}
	verdict := func(pass bool, text string) string {
		if pass {
			return "met: " + text
		}
		return "MISSED: " + text
	}
	floor, hasFloor := med(k, "floor")
	em, hasEM := med(k, "etcdmutex")
	switch {
	case k.bench == "Cycle" && hasFloor && hasEM:
		return verdict(fk <= 1.10*floor && fk <= em, "<= 1.10x floor and <= etcdmutex")
	case k.bench == "Handoff" && haveCycle:
		text := fmt.Sprintf("<= 2x cycle (%.2fx)", fk*1e6/cycle)
		pass := fk*1e6 <= 2*cycle
		if k.param == "n=2" && hasEM {
			text += fmt.Sprintf("; >= 20x faster than etcdmutex (%.1fx)", em/fk)
			pass = pass && em >= 20*fk
		}
		return verdict(pass, text)
	case k.bench == "LossSignal" && k.unit == "early_pct" && strings.HasPrefix(k.param, "partition"):
		return verdict(fk == 100, "Done before any other acquisition in 100% of trials")
	case k.bench == "ManyLocks" && k.unit == "heapB/lock":
		return verdict(fk <= 2048, "<= 2 KiB per lock")
	case k.bench == "Guard" && k.param == "http" && hasFloor:
		return verdict(fk-floor < 5000, fmt.Sprintf("< 5 µs added (%.2f µs)", (fk-floor)/1e3))
	case k.bench == "Guard" && k.param == "http-verified" && hasFloor:
		// The floor is the same guard without a verifier.
		return verdict(fk-floor < 5000, fmt.Sprintf("< 5 µs added by the verifier, token equal to the mark (%.2f µs)", (fk-floor)/1e3))
	case k.bench == "Guard" && strings.HasSuffix(k.param, "-rowcol") && hasFloor:
		return verdict(fk <= 1.15*floor, "<= 1.15x plain UPDATE")
	case k.bench == "Guard" && strings.HasSuffix(k.param, "-table") && hasFloor:
		return verdict(fk <= 1.6*floor, "<= 1.6x plain UPDATE in a transaction")
	}
	return ""
}
