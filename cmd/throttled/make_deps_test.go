package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Each make target installs what it uses: the demo a newcomer runs first
// needs PostgreSQL alone and must not spend minutes installing Patroni,
// podman or a browser. make -n prints what a target would run without
// running it.
func TestMakeTargetsInstallWhatTheyUse(t *testing.T) {
	all := []string{"ensure-postgres", "ensure-patroni", "ensure-pgbouncer", "ensure-podman", "ensure-alertmanager", "ensure-promtool", "ensure-chromium"}
	for _, tc := range []struct {
		target string
		want   []string
	}{
		{"demo", []string{"ensure-postgres"}},
		{"bench", []string{"ensure-postgres"}},
		// adaptive-app reads a real Prometheus.
		{"replay", []string{"ensure-postgres", "ensure-promtool"}},
		{"replay-app", []string{"ensure-postgres", "ensure-promtool"}},
		{"step", []string{"ensure-postgres"}},
		{"chaos", []string{"ensure-postgres"}},
		{"load", []string{"ensure-postgres"}},
		{"failover", []string{"ensure-postgres", "ensure-patroni"}},
		{"transcript", []string{"ensure-postgres", "ensure-podman"}},
		{"test", all},
	} {
		t.Run(tc.target, func(t *testing.T) {
			out, err := exec.Command("make", "-n", "-C", "../..", tc.target).CombinedOutput()
			if err != nil {
				t.Fatalf("make -n %s: %v\n%s", tc.target, err, out)
			}
			for _, s := range all {
				got := strings.Contains(string(out), "scripts/"+s)
				want := false
				for _, w := range tc.want {
					want = want || w == s
				}
				if got != want {
					t.Errorf("make %s runs scripts/%s: %v, want %v", tc.target, s, got, want)
				}
			}
			if !strings.Contains(string(out), "mod download") {
				t.Errorf("make %s does not download the Go modules:\n%s", tc.target, out)
			}
		})
	}
}
