package signals

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/promtest"
)

// A selector's offset is kept in the dating: x offset 15s is dated by the
// newest sample of x fifteen seconds ago, so a rule's max_age of 10s
// reads it stale. The dating query used to strip the offset: old data
// read as fresh as x's newest sample.
func TestPrometheusOffsetDatedByItsData(t *testing.T) {
	a := newApp(t)
	prom := promtest.Start(t, promtest.Options{Targets: []string{a.exp.Addr}})
	const offset = 15 * time.Second
	prom.WaitSeries(t, "app_single offset 15s", 1, 45*time.Second)
	prom.WaitSeries(t, "rate(app_latency_seconds_count[5s] offset 15s)", 1, 30*time.Second)
	r := &reader{cfg: PrometheusConfig{Address: prom.URL}}
	const maxAge = 10 * time.Second
	for _, tc := range []struct {
		query string
		old   bool
	}{
		{"app_single", false},
		{"app_single offset 15s", true},
		{"avg_over_time(app_single[5s] offset 15s)", true},
		{"app_single + 0 * scalar(sum(rate(app_latency_seconds_count[5s] offset 15s)))", true},
		{"app_single offset -15s", false},
	} {
		t.Run(tc.query, func(t *testing.T) {
			x := read(r.sampler(t, absolute("app_value", tc.query)))
			now := time.Now()
			if x.Err != nil || x.Value != 0.25 {
				t.Fatalf("got %+v (error %v), want 0.25", x, x.Err)
			}
			age := x.Age(now)
			switch {
			case tc.old && age < offset:
				t.Errorf("dated %s ago, want at least the offset %s: the data's own time", age.Round(time.Millisecond), offset)
			case tc.old && !x.Stale(now, maxAge):
				t.Errorf("dated %s ago: not stale under max_age %s", age.Round(time.Millisecond), maxAge)
			case !tc.old && (age < 0 || age > 5*time.Second):
				t.Errorf("dated %s ago, want the last scrape's (every second)", age.Round(time.Millisecond))
			}
		})
	}
}

// The @ modifier pins data to a time, and an offset on a subquery is
// one the dating cannot attach to a selector: both are refused at load,
// naming the signal and the modifier. An offset on a selector is not.
func TestPrometheusModifierProblems(t *testing.T) {
	for _, tc := range []struct {
		query, traffic string
		want           string // "" for no problem
	}{
		{query: "app_single offset 10m"},
		{query: "rate(x[5m] offset 1m) / on() y offset -30s"},
		{query: "max_over_time(x[5m:1m] offset 10m)"},
		{query: `x{a="@ offset"} # @ offset`},
		{query: "x @ 1700000000", want: "query: @ "},
		{query: "x @ end()", want: "query: @ "},
		{query: "x", traffic: "sum(rate(y[1m] @ start()))", want: "traffic: @ "},
		{query: "max_over_time(rate(x[1m])[5m:1m] offset 10m)", want: "query: offset"},
		{query: "sum(x) offset 5m", want: "query: offset"},
		{query: "x offset (5m)", want: "query: offset"},
		{query: "x offset 5m offset 5m", want: "query: offset"},
	} {
		t.Run(tc.query+" "+tc.traffic, func(t *testing.T) {
			sig := absolute("app_value", tc.query)
			sig.Traffic = tc.traffic
			cfg := PrometheusConfig{Address: "http://127.0.0.1:9090", Signals: []PrometheusSignal{sig}}
			got := strings.Join(cfg.Problems(), "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("problems %q, want one saying %q", got, tc.want)
			case tc.want != "" && !strings.Contains(got, `prometheus signal "app_value" (throttled.hcl:7)`):
				t.Errorf("problems %q do not name the signal and its source", got)
			}
		})
	}
}

// The selectors a reading is dated by: each at its own offset.
func TestDatedSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (le) (rate(x[1m] offset 5m)) / on(job) group_left sum(y{a="b}"})`, []string{"x offset 5m", `y{a="b}"}`}},
		{`x / x offset 1w`, []string{"x", "x offset 1w"}},
		{`x offset -30s + x OFFSET - 1h30m`, []string{"x offset -30s", "x offset -1h30m"}},
		{`max_over_time(x[5m:1m] offset 10m) # offset 1m`, []string{"x offset 10m"}},
		{`{job="api"} offset 2m`, []string{`{job="api"} offset 2m`}},
		{`rate(x_offset[1m])`, []string{"x_offset"}},
		{`vector(1)`, nil},
	} {
		got, problems := datedSelectors(tc.expr)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || problems != nil {
			t.Errorf("datedSelectors(%s) = %q, %q; want %q and no problem", tc.expr, got, problems, tc.want)
		}
	}
}

// FuzzDatedSelectors: any text, however broken, gives dated selectors
// without panicking, each one non-empty and starting with a selector
// selectors finds.
func FuzzDatedSelectors(f *testing.F) {
	for _, s := range []string{`rate(x[1m] offset 5m)`, "x offset", "x offset -", "x @ 1 offset 2m", "(x)[5m:] offset 1m", "offset 5m", "x offset 5m offset"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		plain := selectors(expr)
		dated, _ := datedSelectors(expr)
		for _, d := range dated {
			if d == "" || !slices.ContainsFunc(plain, func(p string) bool { return d == p || strings.HasPrefix(d, p+" offset ") }) {
				t.Fatalf("datedSelectors(%q) has %q, not one of selectors' %q", expr, d, plain)
			}
		}
	})
}
