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
		if u == "throttled_job" { // the job label, not a metric
			continue
		}
		if !slices.Contains(names, u) {
			t.Errorf("deploy/alerts.yml uses %s, which throttled does not export", u)
		}
	}
}

// TestEveryAlertLinksItsRunbookSection: every rule has a runbook_url whose
// anchor is a section of docs/RUNBOOK.md named as the alert.
func TestEveryAlertLinksItsRunbookSection(t *testing.T) {
	rules, err := os.ReadFile("../deploy/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("../docs/RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1)
	urls := regexp.MustCompile(`runbook_url: "[^"]*/docs/RUNBOOK\.md#(\w+)"`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) == 0 || len(alerts) != len(urls) {
		t.Fatalf("%d alerts, %d runbook_urls: every rule needs one", len(alerts), len(urls))
	}
	for i, a := range alerts {
		if urls[i][1] != strings.ToLower(a[1]) {
			t.Errorf("alert %s links #%s; want #%s", a[1], urls[i][1], strings.ToLower(a[1]))
		}
		if !strings.Contains(string(runbook), "\n## "+a[1]+"\n") {
			t.Errorf("docs/RUNBOOK.md has no section ## %s", a[1])
		}
	}
}
