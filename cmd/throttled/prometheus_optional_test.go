package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// optionalPromHCL is a Prometheus block at address and one signal on it
// whose rule says required = required.
func optionalPromHCL(address string, required bool) string {
	return fmt.Sprintf(`prometheus {
  address = %q
  timeout = "500ms"
}
prometheus_signal "api_p99" {
  query = "max(app_p99_seconds)"
  unit  = "seconds"
}
signal "api_p99" {
  target   = 1.5
  required = %t
}
`, address, required)
}

// A Prometheus that a signal whose rule is not required reads, down,
// never keeps run from starting: the sidecar serves (its pauses and pages
// with it), and check-config --live passes with a warning naming the
// signal. A required one still refuses the start, and says it is
// required.
func TestRunStartsWithAnOptionalPrometheusSignalDown(t *testing.T) {
	c := pgtest.Cluster(t)
	setTokens(t)
	down := "http://" + freeAddr(t) // nothing listens there

	t.Run("required = false starts", func(t *testing.T) {
		addr := freeAddr(t)
		path := filepath.Join(t.TempDir(), "throttled.hcl")
		writeConfig(t, path, c, addr, "replica1", optionalPromHCL(down, false))
		r := runCmd("check-config", "--live", "--config", path)
		if r.code != exitOK || !strings.Contains(r.out, "warning:") || !strings.Contains(r.out, `"api_p99"`) || !strings.Contains(r.out, "not required") {
			t.Fatalf("check-config --live: exit %d, want 0 with a warning naming api_p99:\n%s", r.code, r.out)
		}
		logs := startRun(t, path, addr)
		if !strings.Contains(logs.String(), "starting with a signal unread") {
			t.Errorf("run's log does not warn of the unread signal:\n%s", logs.String())
		}
		if body := get(t, addr, "/v1/status"); !strings.Contains(body, "api_p99") {
			t.Errorf("/v1/status does not show api_p99:\n%s", body)
		}
	})
	t.Run("required refuses, saying so", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "throttled.hcl")
		writeConfig(t, path, c, freeAddr(t), "replica1", optionalPromHCL(down, true))
		for _, args := range [][]string{{"check-config", "--live", "--config", path}, {"run", "--config", path, "--log-level", "info"}} {
			r := runCmd(args...)
			if r.code == exitOK || !strings.Contains(r.out, `"api_p99"`) || !strings.Contains(r.out, "its rule is required") {
				t.Errorf("%s: exit %d, want a refusal naming api_p99 and its required rule:\n%s", args[0], r.code, r.out)
			}
		}
	})
}
