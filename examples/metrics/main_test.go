package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	rulesFile     = "../../monitoring/fencekit.rules.yaml"
	rulesTestFile = "../../monitoring/fencekit.rules.test.yaml"
	dashboardFile = "../../monitoring/fencekit-dashboard.json"
)

// TestMonitoringSeriesExist runs the program, scrapes its /metrics over
// HTTP as Prometheus would, and fails when a series, a label or a label
// value that the rules or the dashboard use is not exported.
func TestMonitoringSeriesExist(t *testing.T) {
	exprs := append(ruleExprs(t), dashboardExprs(t)...)
	recorded := recordedLabels(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var scraped map[string]*series
	err = run(ctx, ln, io.Discard, func(context.Context) error {
		var err error
		scraped, err = scrape("http://" + ln.Addr().String() + "/metrics")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exprs {
		for _, problem := range check(e, scraped, recorded) {
			t.Errorf("%s: %s", e.where, problem)
		}
	}
	t.Logf("checked %d expressions against %d exported series names", len(exprs), len(scraped))
}

// TestEveryAlertTested fails unless each alert of the rules has a test
// case in which it fires and one in which it stays silent.
func TestEveryAlertTested(t *testing.T) {
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string            `json:"alertname"`
				ExpAlerts []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, rulesTestFile, &tests)
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !firing[r.Alert] {
				t.Errorf("alert %s has no test case in which it fires", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("alert %s has no test case in which it stays silent", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// expr is a PromQL expression and where it was found.
type expr struct {
	where, text string
}

func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func ruleExprs(t *testing.T) []expr {
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	var out []expr
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, expr{where: fmt.Sprintf("%s: rule %s%s", rulesFile, r.Record, r.Alert), text: r.Expr})
		}
	}
	return out
}

func dashboardExprs(t *testing.T) []expr {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []expr
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, expr{where: fmt.Sprintf("%s: panel %q", dashboardFile, p.Title), text: tg.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}
	return out
}

// recordedLabels maps each recording rule's name to the labels its
// series carry: those it groups by, and those label_replace adds.
func recordedLabels(t *testing.T) map[string]map[string]bool {
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	out := map[string]map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			labels := map[string]bool{}
			for _, l := range groupingLabels(r.Expr) {
				labels[l] = true
			}
			for _, m := range labelReplaceRE.FindAllStringSubmatch(r.Expr, -1) {
				labels[m[1]] = true
			}
			delete(labels, "le")
			out[r.Record] = labels
		}
	}
	return out
}

// series is what a scrape exported under one sample name: each label's
// values.
type series struct {
	labels map[string]map[string]bool
}

// scrape reads url's metrics in the text format, by sample name
// (histograms as their _bucket, _sum and _count series).
func scrape(url string) (map[string]*series, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]*series{}
	add := func(name string, labels map[string]string) {
		s := out[name]
		if s == nil {
			s = &series{labels: map[string]map[string]bool{}}
			out[name] = s
		}
		for k, v := range labels {
			if s.labels[k] == nil {
				s.labels[k] = map[string]bool{}
			}
			s.labels[k][v] = true
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				add(name+"_sum", labels)
				add(name+"_count", labels)
				for _, b := range h.GetBucket() {
					add(name+"_bucket", with(labels, "le", fmt.Sprint(b.GetUpperBound())))
				}
				add(name+"_bucket", with(labels, "le", "+Inf"))
				continue
			}
			add(name, labels)
		}
	}
	return out, nil
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

var (
	// A series selector: a fencekit metric or recording rule name, and
	// its matchers if any.
	selectorRE = regexp.MustCompile(`\b(fencekit[_:][A-Za-z0-9_:]*)(\{[^}]*\})?`)
	matcherRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	// label_replace(v, "dst", ...): the label it adds.
	labelReplaceRE = regexp.MustCompile(`label_replace\([^"]*"([A-Za-z_][A-Za-z0-9_]*)"`)
	wordsRE        = regexp.MustCompile(`^[A-Za-z0-9_|]+$`)
)

// targetLabels are added by Prometheus when it scrapes, not exported.
var targetLabels = map[string]bool{"job": true, "instance": true}

func groupingLabels(text string) []string {
	var out []string
	for _, m := range groupingRE.FindAllStringSubmatch(text, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// check returns what e uses that the scrape does not have.
func check(e expr, scraped map[string]*series, recorded map[string]map[string]bool) []string {
	var problems []string
	known := map[string]bool{"le": true} // labels of the expression's series
	for _, l := range labelReplaceRE.FindAllStringSubmatch(e.text, -1) {
		known[l[1]] = true
	}
	for _, m := range selectorRE.FindAllStringSubmatch(e.text, -1) {
		name, matchers := m[1], m[2]
		labels, values, ok := labelsOf(name, scraped, recorded)
		if !ok {
			problems = append(problems, fmt.Sprintf("series %s is not exported (nor recorded by a rule)", name))
			continue
		}
		for l := range labels {
			known[l] = true
		}
		for _, mm := range matcherRE.FindAllStringSubmatch(matchers, -1) {
			problems = append(problems, checkMatcher(name, mm[1], mm[2], mm[3], labels, values)...)
		}
	}
	for _, l := range groupingLabels(e.text) {
		if !known[l] && !targetLabels[l] {
			problems = append(problems, fmt.Sprintf("label %q (grouping) is on none of the expression's series", l))
		}
	}
	sort.Strings(problems)
	return slices.Compact(problems)
}

// labelsOf returns the labels of the series name and, for a scraped
// one, each label's values; for a recorded one, the values of every
// scraped fencekit series (it records their labels).
func labelsOf(name string, scraped map[string]*series, recorded map[string]map[string]bool) (map[string]bool, map[string]map[string]bool, bool) {
	if s, ok := scraped[name]; ok {
		labels := map[string]bool{}
		for l := range s.labels {
			labels[l] = true
		}
		return labels, s.labels, true
	}
	if labels, ok := recorded[name]; ok {
		values := map[string]map[string]bool{}
		for _, s := range scraped {
			for l, vs := range s.labels {
				if values[l] == nil {
					values[l] = map[string]bool{}
				}
				for v := range vs {
					values[l][v] = true
				}
			}
		}
		return labels, values, true
	}
	return nil, nil, false
}

// checkMatcher checks one matcher of series name: its label must exist,
// and each value an equality or a regular expression of plain words
// ("a|b") names must have been exported.
func checkMatcher(name, label, op, value string, labels map[string]bool, values map[string]map[string]bool) []string {
	if targetLabels[label] {
		return nil
	}
	if !labels[label] {
		return []string{fmt.Sprintf("%s has no label %q", name, label)}
	}
	var want []string
	switch {
	case op == "=" || op == "!=":
		want = []string{value}
	case wordsRE.MatchString(value):
		want = strings.Split(value, "|")
	}
	var problems []string
	for _, v := range want {
		if !values[label][v] {
			problems = append(problems, fmt.Sprintf("%s{%s=%q} is not exported", name, label, v))
		}
	}
	return problems
}
