package dashboards

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/throttled/throttled/sidecar"
)

var update = flag.Bool("update", false, "rewrite the committed dashboards")

// TestGeneratedDashboardsAreCommitted fails when a committed JSON file
// differs from what this package generates.
func TestGeneratedDashboardsAreCommitted(t *testing.T) {
	for name, d := range All() {
		want := Marshal(d)
		got, err := os.ReadFile(name)
		if *update {
			if err := os.WriteFile(name, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the generator makes; run: go test ./dashboards -run Generated -update", name)
		}
	}
}

var (
	metricRe = regexp.MustCompile(`throttled_[a-z_]+`)
	rateRe   = regexp.MustCompile(`(rate|increase)\(([^\[]+)\[([^\]]+)\]\)`)
	// labelsRe finds what holds label names, not metrics: by (…) and {…}.
	labelsRe = regexp.MustCompile(`(by|without) \([^)]*\)|\{[^}]*\}`)
)

// metrics are the metric names expr uses.
func metrics(expr string) []string {
	return metricRe.FindAllString(labelsRe.ReplaceAllString(expr, " "), -1)
}

// TestDashboardsLint: the datasource and cluster variables, a unit and
// the datasource variable on every panel and query, $__rate_interval in
// every rate, counters only under rate or increase, and only metrics the
// code exports.
func TestDashboardsLint(t *testing.T) {
	exported := sidecar.MetricNames()
	uids := map[string]bool{}
	for name, d := range All() {
		if d.UID == "" || uids[d.UID] {
			t.Errorf("%s: uid %q missing or not unique", name, d.UID)
		}
		uids[d.UID] = true
		var vars []string
		for _, v := range d.Templating.List {
			vars = append(vars, v.Name)
		}
		if !slices.Contains(vars, "datasource") || !slices.Contains(vars, "cluster") {
			t.Errorf("%s: variables %v; want datasource and cluster", name, vars)
		}
		prom := 0
		for _, a := range d.Annotations.List {
			if a.Datasource.Type != "prometheus" {
				continue
			}
			prom++
			if a.Datasource.UID != "${datasource}" || !strings.Contains(a.Expr, `cluster=~"$cluster"`) || a.TitleFormat == "" {
				t.Errorf("%s: annotation %q: want the datasource and cluster variables and a title", name, a.Name)
			}
			for _, metric := range metrics(a.Expr) {
				if !slices.Contains(exported, metric) {
					t.Errorf("%s: annotation %q uses %s, which throttled does not export", name, a.Name, metric)
				}
			}
		}
		if prom < 2 {
			t.Errorf("%s: %d Prometheus annotations; want hold regions and auto-pauses", name, prom)
		}
		for _, p := range d.Panels {
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: panel %q has no unit", name, p.Title)
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q does not use the datasource variable", name, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", name, p.Title)
			}
			for _, q := range p.Targets {
				if q.Datasource.UID != "${datasource}" {
					t.Errorf("%s: panel %q: a query without the datasource variable", name, p.Title)
				}
				if !strings.Contains(q.Expr, `cluster=~"$cluster"`) {
					t.Errorf("%s: panel %q: %s does not filter on the cluster variable", name, p.Title, q.Expr)
				}
				for _, m := range rateRe.FindAllStringSubmatch(q.Expr, -1) {
					// rate over $__rate_interval; increase may also
					// total the dashboard's range.
					if m[3] != "$__rate_interval" && (m[1] != "increase" || m[3] != "$__range") {
						t.Errorf("%s: panel %q: %s over %s; want $__rate_interval", name, p.Title, m[1], m[3])
					}
				}
				underRate := strings.Join(func() []string {
					var s []string
					for _, m := range rateRe.FindAllStringSubmatch(q.Expr, -1) {
						s = append(s, m[2])
					}
					return s
				}(), " ")
				for _, metric := range metrics(q.Expr) {
					base := strings.TrimSuffix(metric, "_bucket")
					if !slices.Contains(exported, base) {
						t.Errorf("%s: panel %q uses %s, which throttled does not export", name, p.Title, metric)
					}
					if (strings.HasSuffix(metric, "_total") || strings.HasSuffix(metric, "_bucket")) && !strings.Contains(underRate, metric) {
						t.Errorf("%s: panel %q uses counter %s outside rate or increase", name, p.Title, metric)
					}
				}
			}
		}
	}
}

// Every data link goes to a page the sidecar serves with GET, carries the
// row's job, and returns to this dashboard.
func TestDataLinksReachTheConfirmPage(t *testing.T) {
	pages := map[string]bool{}
	for _, r := range sidecar.Routes() {
		if method, path, _ := strings.Cut(r.Pattern, " "); method == "GET" && r.Scope == sidecar.ScopeUI {
			pages[path] = true
		}
	}
	n := 0
	for file, d := range All() {
		for _, p := range d.Panels {
			for _, l := range p.FieldConfig.Defaults.Links {
				n++
				rest, ok := strings.CutPrefix(l.URL, "${throttled_url}")
				path, query, _ := strings.Cut(rest, "?")
				if !ok || !pages[path] {
					t.Errorf("%s: panel %q: link %q goes to %q, not a confirm page the sidecar serves", file, p.Title, l.Title, path)
				}
				if !strings.Contains(query, "job=${__data.fields.throttled_job") || !strings.Contains(query, "return=${grafana_url") {
					t.Errorf("%s: panel %q: link %q lacks the row's job or the way back: %s", file, p.Title, l.Title, query)
				}
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d data links; the jobs table needs Pause… and Resume…", n)
	}
}

// A Prometheus signal, whatever the operator named it, shows on the
// overview: its value, age and failure, and its job-free baseline, each on
// a panel that selects the signals by label (throttled_signals_prometheus_info
// or the baseline's own metric), never by a list of names. A panel that
// named its signals would miss the next one configured.
// go test ./cmd/throttled -run DashboardShowsPrometheusSignals runs these
// queries on a real Prometheus.
func TestPrometheusSignalsShowOnTheOverview(t *testing.T) {
	need := map[string]bool{"throttled_signals_value": false, "throttled_signals_age_seconds": false,
		"throttled_signals_failed": false, "throttled_signals_baseline": false}
	for _, p := range Overview().Panels {
		for _, q := range p.Targets {
			byLabel := strings.Contains(q.Expr, "throttled_signals_prometheus_info") || strings.Contains(q.Expr, "throttled_signals_baseline")
			if !byLabel || strings.Contains(q.Expr, `signal="`) || strings.Contains(q.Expr, `signal=~"`) {
				continue
			}
			if !strings.Contains(q.Expr, "by (signal)") || !strings.Contains(q.LegendFormat, "{{signal}}") {
				t.Errorf("panel %q: %s selects Prometheus signals but does not show each by its name", p.Title, q.Expr)
			}
			for _, m := range metrics(q.Expr) {
				if _, ok := need[m]; ok {
					need[m] = true
				}
			}
		}
	}
	for m, ok := range need {
		if !ok {
			t.Errorf("no overview panel shows %s of every Prometheus signal by label", m)
		}
	}
}
