package sidecar

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestAlertRulesUseOnlyExportedMetrics fails when deploy/alerts.yml names
// a metric the code does not export, and checks the names' shape.
func TestAlertRulesUseOnlyExportedMetrics(t *testing.T) {
	names := MetricNames()
	if len(names) < 10 {
		t.Fatalf("only %d metric names: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "throttled_") || strings.Count(n, "_") < 2 {
			t.Errorf("metric %q: want throttled_<subsystem>_<thing>", n)
		}
	}
	rules, err := os.ReadFile("../deploy/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`throttled_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("the alert rules name no metric")
	}
	for _, u := range used {
		if !slices.Contains(names, u) {
			t.Errorf("deploy/alerts.yml uses %s, which throttled does not export", u)
		}
	}
}

// A job's why label stays within a small set however its reason reads:
// no numbers, no free text, the hold's id and nothing after it.
func TestWhyIsBounded(t *testing.T) {
	for _, tc := range []struct {
		js   jobJSON
		want string
	}{
		{jobJSON{State: "paused", Reason: "paused: hold h12 on job:purge by alice (manual): vacuum first, until 2026-11-30T16:00:00Z"}, "hold h12"},
		{jobJSON{State: "paused", Reason: "paused: hold 42: deploy window"}, "hold 42"},
		{jobJSON{State: "paused", Reason: "paused: allocation lease expired", Unavailable: true}, "no valid allocation"},
		{jobJSON{State: "throttled", Reason: "throttled: primary_load at 0.93 of target 0.70", Binding: "primary_load"}, "binding primary_load"},
		{jobJSON{State: "running", Reason: "running"}, "running"},
	} {
		if got := why(tc.js); got != tc.want {
			t.Errorf("why(%q) = %q; want %q", tc.js.Reason, got, tc.want)
		}
	}
	if got := cut("ééééé", 3); got != "éé…" {
		t.Errorf("cut = %q", got)
	}
}
