package main

import (
	"os"
	"strings"
	"testing"

	"github.com/throttled/throttled/config"
)

// TestDeploymentExamples keeps deploy/ true to the binary: the commands
// and flags the examples use exist, and the embedded configuration parses.
func TestDeploymentExamples(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/throttled.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"throttled run --config", "throttled check-config --config", "ExecReload=/bin/kill -HUP"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("systemd unit lacks %q", want)
		}
	}
	names := map[string]bool{}
	for _, c := range commands() {
		names[c.name] = true
	}
	if !names["run"] || !names["check-config"] {
		t.Fatal("the examples' commands do not exist")
	}
	k8s, err := os.ReadFile("../../deploy/kubernetes-sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(k8s)
	start := strings.Index(text, "throttled.hcl: |\n")
	end := strings.Index(text, "\n---")
	if start < 0 || end < start {
		t.Fatal("no embedded configuration in the manifest")
	}
	var hcl []string
	for _, line := range strings.Split(text[start+len("throttled.hcl: |\n"):end], "\n") {
		hcl = append(hcl, strings.TrimPrefix(line, "    "))
	}
	env := map[string]string{"THROTTLED_PRIMARY_DSN": "postgres://m@db/app", "THROTTLED_COORDINATION_DSN": "postgres://w@db/app",
		"THROTTLED_TOKEN_WORKER": "worker-secret-0123456789", "THROTTLED_TOKEN_OPS": "ops-secret-0123456789"}
	if _, err := config.Parse("kubernetes-sidecar.yaml", []byte(strings.Join(hcl, "\n")), func(k string) string { return env[k] }); err != nil {
		t.Fatalf("the manifest's configuration: %v", err)
	}
	for _, want := range []string{`"run", "--config"`, "/healthz", "/readyz"} {
		if !strings.Contains(text, want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
}
