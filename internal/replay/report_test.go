package replay

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/throttle"
)

func TestReplaceSection(t *testing.T) {
	for _, tc := range []struct {
		name, doc, body, want, err string
	}{
		{"between markers", "# B\n\nmicro\n" + BeginMarker + "\nold\n" + EndMarker + "\ntail\n", "new\n",
			"# B\n\nmicro\n" + BeginMarker + "\nnew\n" + EndMarker + "\ntail\n", ""},
		{"appended when missing", "# B\nmicro", "new\n", "# B\nmicro\n\n" + BeginMarker + "\nnew\n" + EndMarker + "\n", ""},
		{"empty file", "", "new\n", BeginMarker + "\nnew\n" + EndMarker + "\n", ""},
		{"one marker", "x\n" + EndMarker + "\n", "new\n", "", "one replay marker"},
		{"out of order", EndMarker + "\n" + BeginMarker + "\n", "new\n", "", "out of order"},
		{"two sections", BeginMarker + EndMarker + BeginMarker + EndMarker, "new\n", "", "more than one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReplaceSection(tc.doc, tc.body)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestRoundRate(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0.37, 0.37}, {1.234, 1.2}, {17.8, 18}, {0, 0.1}, {0.01, 0.1}, {456, 460}} {
		if got := roundRate(tc.in); got != tc.want {
			t.Errorf("roundRate(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestSummarizeTakesMediansAndMarksTheOracle(t *testing.T) {
	rs := []Result{
		// Foreground alone, twice per repetition: p99s 90, 100, 110, 300.
		{Scenario: "s", Policy: PolicyForeground, Rep: 1, P99: 90},
		{Scenario: "s", Policy: "fixed-1", FixedRate: 1, Rep: 1, P99: 105, Rows: 10},
		{Scenario: "s", Policy: "fixed-2", FixedRate: 2, Rep: 1, P99: 300, Rows: 20},
		{Scenario: "s", Policy: "fixed-4", FixedRate: 4, Rep: 1, P99: 150, Rows: 40},
		{Scenario: "s", Policy: PolicyAdaptive, Rep: 1, P99: 120, Rows: 30},
		{Scenario: "s", Policy: PolicyForegroundAgain, Rep: 1, P99: 300},
		{Scenario: "s", Policy: PolicyForegroundAgain, Rep: 2, P99: 110},
		{Scenario: "s", Policy: PolicyAdaptive, Rep: 2, P99: 100, Rows: 34},
		{Scenario: "s", Policy: "fixed-4", FixedRate: 4, Rep: 2, P99: 160, Rows: 40},
		{Scenario: "s", Policy: "fixed-2", FixedRate: 2, Rep: 2, P99: 100, Rows: 20},
		{Scenario: "s", Policy: "fixed-1", FixedRate: 1, Rep: 2, P99: 95, Rows: 10},
		{Scenario: "s", Policy: PolicyForeground, Rep: 2, P99: 100},
		{Scenario: "s", Policy: "fixed-2", FixedRate: 2, Rep: 3, P99: 108, Rows: 20},
	}
	ss := summarize(rs)
	var names []string
	by := map[string]Summary{}
	for _, s := range ss {
		names = append(names, s.Policy)
		by[s.Policy] = s
	}
	if got := strings.Join(names, ","); got != "foreground,fixed-1,fixed-2,fixed-4,adaptive" {
		t.Fatalf("summaries %s; want one per policy in first-run order, foreground-again counted as foreground", got)
	}
	fg := by[PolicyForeground]
	if fg.Runs != 4 || fg.P99 != 105 || fg.P99Min != 90 || fg.P99Max != 300 || fg.P99VsForeground != 1 {
		t.Errorf("foreground alone: %+v; want 4 runs, median 105 (of 90, 100, 110, 300), range 90-300, ratio 1", fg)
	}
	// fixed-2's one stray run (300) does not decide it: its median is 108.
	if f := by["fixed-2"]; f.P99 != 108 || f.Runs != 3 || !f.Oracle {
		t.Errorf("fixed-2: %+v; want median p99 108 over 3 runs, within +10 %% of 105: the oracle", f)
	}
	if by["fixed-1"].Oracle || by["fixed-4"].Oracle {
		t.Error("the oracle is the fixed rate that cleaned most within the slack, and only it")
	}
	if a := by[PolicyAdaptive]; a.P99 != 110 || a.Rows != 32 || a.P99VsForeground != 110.0/105 {
		t.Errorf("adaptive: %+v; want median p99 110, rows 32, ratio 110/105", a)
	}
	if rs[4].P99VsForeground != 120.0/105 {
		t.Errorf("a run's own ratio is to the median of foreground alone: %v", rs[4].P99VsForeground)
	}
	if s := by[PolicyAdaptive]; rs[s.median].P99 != 100 && rs[s.median].P99 != 120 {
		t.Errorf("the plotted run has p99 %v; want the run nearest the median", rs[s.median].P99)
	}
}

func TestGoals(t *testing.T) {
	rs := []Result{
		{Scenario: "s", Policy: PolicyForeground, P99: 100, AboveCritical: 2},
		{Scenario: "s", Policy: "fixed-2", FixedRate: 2, P99: 109, Rows: 100},
		{Scenario: "s", Policy: PolicyAdaptive, P99: 108, Rows: 85, AboveCritical: 2},
		{Scenario: "s", Policy: PolicyAdaptiveLoad, P99: 130, Rows: 70, AboveCritical: 3.5},
		{Scenario: "t", Policy: PolicyForeground, P99: 100},
		{Scenario: "t", Policy: PolicyAdaptive, P99: 105, Rows: 5},
	}
	rep := &Report{Results: rs, Summaries: summarize(rs)}
	gs := rep.Goals("s")
	if len(gs) != 2 {
		t.Fatalf("goals %v, want adaptive and adaptive-load", gs)
	}
	if g := gs[0]; !g.Met() || g.ExtraCritical != 0 || g.RowsVsOracle != 0.85 {
		t.Errorf("adaptive: %+v; want every goal met, 0 s extra, 0.85 of the oracle", g)
	}
	g := gs[1]
	if g.Met() || g.P99Met || g.CriticalMet || g.RowsMet || g.ExtraCritical != 1.5 {
		t.Errorf("adaptive-load: %+v; want none met, 1.5 s extra above critical", g)
	}
	if s := g.String(); !strings.Contains(s, "1.30× foreground alone") || strings.Count(s, "**not met**") != 3 {
		t.Errorf("adaptive-load: %q", s)
	}
	// No fixed run: no oracle, so rows are not judged.
	if gs := rep.Goals("t"); len(gs) != 1 || !gs[0].Met() || !strings.Contains(gs[0].String(), "no oracle") {
		t.Errorf("scenario without an oracle: %v", gs)
	}
}

func TestTablesShowTheForegroundNoise(t *testing.T) {
	rs := []Result{
		{Scenario: "surge", Policy: PolicyForeground, Rep: 1, P99: 2 * time.Millisecond},
		{Scenario: "surge", Policy: PolicyAdaptive, Rep: 1, P99: 3 * time.Millisecond},
		{Scenario: "surge", Policy: PolicyForegroundAgain, Rep: 1, P99: 2500 * time.Microsecond},
		{Scenario: "surge", Policy: PolicyForegroundAgain, Rep: 2, P99: 2200 * time.Microsecond},
		{Scenario: "surge", Policy: PolicyAdaptive, Rep: 2, P99: 2 * time.Millisecond},
		{Scenario: "surge", Policy: PolicyForeground, Rep: 2, P99: 1800 * time.Microsecond},
	}
	var b strings.Builder
	(&Report{Scenarios: []Scenario{{Name: "surge", Description: "foreground arrivals double"}}, Results: rs, Summaries: summarize(rs)}).WriteTables(&b)
	for _, want := range []string{
		"run 4 times, had p99 from 1.8 to 2.5 ms (median 2.1)",
		"| foreground | 4 | ", "| 1.8–2.5 |",
		"| **adaptive** | 2 | ", "| 2.0–3.0 |", "| 1.19 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, b.String())
		}
	}
}

func TestSectionSaysHowItRan(t *testing.T) {
	for _, tc := range []struct {
		rep  Report
		want []string
	}{
		{Report{Repeat: 1}, []string{"Every scenario ran once (--repeat 1).", "adaptive is the product's defaults (the foreground-latency canary on, target " + fmt.Sprint(throttle.DefaultForegroundLatencyRule.Target) + ")"}},
		{Report{Repeat: 1, HeldBaseline: true}, []string{"target " + fmt.Sprint(throttle.DefaultForegroundLatencyRule.Target) + "), and with the canary's baseline measured only while the jobs are held (--held-baseline), not the default"}},
		{Report{Repeat: 3, ForegroundTarget: 1.15}, []string{"repeated 3 times", "adaptive is the product's defaults but for its foreground-latency target, 1.15 (--foreground-target) instead of " + fmt.Sprint(throttle.DefaultForegroundLatencyRule.Target)}},
	} {
		got := tc.rep.Section("throttled bench replay")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("repeat %d, target %v: section lacks %q:\n%s", tc.rep.Repeat, tc.rep.ForegroundTarget, w, got)
			}
		}
	}
}
