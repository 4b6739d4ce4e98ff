package main

import (
	"io"
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
	for _, name := range []string{"run", "check-config"} {
		if c, _, err := newRootCmd(io.Discard, io.Discard).Find([]string{name}); err != nil || c.Name() != name || c.Flags().Lookup("config") == nil {
			t.Fatalf("the examples' command %s --config does not exist: %v", name, err)
		}
	}
	// deploy/manifests_test.go (a module of its own) decodes the Kubernetes
	// manifest strictly into the Kubernetes types.
}
