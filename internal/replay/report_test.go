package replay

import (
	"strings"
	"testing"
	"time"
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

func TestCompareMarksOracle(t *testing.T) {
	rs := []Result{
		{Scenario: "s", Policy: PolicyForeground, P99: 100},
		{Scenario: "s", Policy: "fixed-1", FixedRate: 1, P99: 105, Rows: 10},
		{Scenario: "s", Policy: "fixed-2", FixedRate: 2, P99: 109, Rows: 20},
		{Scenario: "s", Policy: "fixed-4", FixedRate: 4, P99: 150, Rows: 40},
		{Scenario: "s", Policy: PolicyAdaptive, P99: 120, Rows: 30},
	}
	compare(rs)
	for _, r := range rs {
		if r.Oracle != (r.Policy == "fixed-2") {
			t.Errorf("%s: oracle %v", r.Policy, r.Oracle)
		}
	}
	if rs[4].P99VsForeground != 1.2 {
		t.Errorf("adaptive ratio %v, want 1.2", rs[4].P99VsForeground)
	}
}

func TestGoals(t *testing.T) {
	rs := []Result{
		{Scenario: "s", Policy: PolicyForeground, P99: 100, AboveCritical: 2},
		{Scenario: "s", Policy: "fixed-2", FixedRate: 2, P99: 109, Rows: 100},
		{Scenario: "s", Policy: PolicyAdaptive, P99: 108, Rows: 85, AboveCritical: 2},
		{Scenario: "s", Policy: PolicyAdaptiveLatency, P99: 130, Rows: 70, AboveCritical: 3.5},
		{Scenario: "t", Policy: PolicyForeground, P99: 100},
		{Scenario: "t", Policy: PolicyAdaptive, P99: 105, Rows: 5},
	}
	compare(rs)
	rep := &Report{Results: rs}
	gs := rep.Goals("s")
	if len(gs) != 2 {
		t.Fatalf("goals %v, want adaptive and adaptive-latency", gs)
	}
	if g := gs[0]; !g.Met() || g.ExtraCritical != 0 || g.RowsVsOracle != 0.85 {
		t.Errorf("adaptive: %+v; want every goal met, 0 s extra, 0.85 of the oracle", g)
	}
	g := gs[1]
	if g.Met() || g.P99Met || g.CriticalMet || g.RowsMet || g.ExtraCritical != 1.5 {
		t.Errorf("adaptive-latency: %+v; want none met, 1.5 s extra above critical", g)
	}
	if s := g.String(); !strings.Contains(s, "1.30× foreground alone") || strings.Count(s, "**not met**") != 3 {
		t.Errorf("adaptive-latency: %q", s)
	}
	// No fixed run: no oracle, so rows are not judged.
	if gs := rep.Goals("t"); len(gs) != 1 || !gs[0].Met() || !strings.Contains(gs[0].String(), "no oracle") {
		t.Errorf("scenario without an oracle: %v", gs)
	}
}

func TestTablesShowTheForegroundNoise(t *testing.T) {
	rs := []Result{
		{Scenario: "surge", Policy: PolicyForeground, P99: 2 * time.Millisecond},
		{Scenario: "surge", Policy: PolicyAdaptive, P99: 3 * time.Millisecond},
		{Scenario: "surge", Policy: PolicyForegroundAgain, P99: 2500 * time.Microsecond},
	}
	compare(rs)
	var b strings.Builder
	(&Report{Scenarios: []Scenario{{Name: "surge", Description: "foreground arrivals double"}}, Results: rs}).WriteTables(&b)
	if want := "p99 2.5 ms, 1.25× the first run's"; !strings.Contains(b.String(), want) {
		t.Fatalf("tables lack %q:\n%s", want, b.String())
	}
}
