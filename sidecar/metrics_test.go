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
