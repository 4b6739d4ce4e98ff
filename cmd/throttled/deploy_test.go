package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDeploymentExamples keeps deploy/ true to the binary: the commands
// and flags the examples use exist, and the embedded configuration parses.
func TestDeploymentExamples(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/throttled.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"throttled run --config", "throttled check-config --config", "Type=notify\n", "ExecReload=/bin/kill -HUP $MAINPID"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("systemd unit lacks %q", want)
		}
	}
	// systemd's own check of the unit, where systemd is installed: every
	// directive known; only the binary, not installed here, may be missing.
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		out, _ := exec.Command("systemd-analyze", "verify", "../../deploy/throttled.service").CombinedOutput()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.Contains(line, "is not executable: No such file or directory") {
				t.Errorf("systemd-analyze verify: %s", line)
			}
		}
	}
	names := map[string]bool{}
	for _, c := range commands() {
		names[c.name] = true
	}
	if !names["run"] || !names["check-config"] {
		t.Fatal("the examples' commands do not exist")
	}
	// deploy/manifests_test.go (a module of its own) decodes the Kubernetes
	// manifest strictly into the Kubernetes types.
}
