package replay

import (
	"strings"
	"testing"
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
