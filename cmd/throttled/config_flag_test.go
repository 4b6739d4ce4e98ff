package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// --config (or THROTTLED_CONFIG) gives signals, exec and the commands on
// holds what the sidecar's file says: its primary, cores and replicas. A
// flag beats it; a secret it needs and lacks is named; a file that is not
// valid exits 4.
func TestConfigFlagOnEveryCommand(t *testing.T) {
	c := pgtest.Cluster(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "throttled.hcl")
	src := `primary {
  dsn              = env("CFG_TEST_MONITOR_DSN")
  coordination_dsn = env("CFG_TEST_ADMIN_DSN")
  cores            = 2
}
replica "` + pgcluster.ReplicaName + `" {
  policy = "required"
}
listen {
  address = "127.0.0.1:18087"
}
job "purge" {}
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	runCLI := func(args ...string) (string, int) {
		var out bytes.Buffer
		code := run(context.Background(), args, &out, &out)
		return out.String(), code
	}

	// The secrets are not set: the command names the one it needs.
	if out, code := runCLI("holds", "--config", path); code != exitUsage || !strings.Contains(out, "CFG_TEST_ADMIN_DSN") {
		t.Fatalf("holds --config without the DSN's variable: exit %d\n%s", code, out)
	}
	t.Setenv("CFG_TEST_MONITOR_DSN", c.Primary.DSN(pgcluster.RoleMonitor))
	t.Setenv("CFG_TEST_ADMIN_DSN", c.Primary.DSN(pgcluster.RoleAdmin))

	out, code := runCLI("pause", "--config", path, "--job", "cfg-flag", "--ttl", "1m", "--reason", "through the file")
	if code != exitOK || !strings.Contains(out, "hold h") {
		t.Fatalf("pause --config: exit %d\n%s", code, out)
	}
	t.Setenv("THROTTLED_CONFIG", path)
	if out, code := runCLI("holds"); code != exitOK || !strings.Contains(out, "job:cfg-flag") {
		t.Fatalf("holds with THROTTLED_CONFIG: exit %d\n%s", code, out)
	}
	if out, code := runCLI("resume", "--job", "cfg-flag", "--reason", "done"); code != exitOK {
		t.Fatalf("resume with THROTTLED_CONFIG: exit %d\n%s", code, out)
	}
	// signals takes the primary, the cores and the required replica.
	out, code = runCLI("signals", "--json")
	if code != exitOK || !strings.Contains(out, `"primary_load"`) || !strings.Contains(out, pgcluster.ReplicaName) {
		t.Fatalf("signals with THROTTLED_CONFIG: exit %d\n%s", code, out)
	}
	// A flag beats the file: a DSN to nowhere fails, so it was used.
	if out, code := runCLI("holds", "--primary-dsn", "postgres://nobody@127.0.0.1:1/x", "--timeout", "2s"); code != exitError {
		t.Fatalf("holds --primary-dsn beside THROTTLED_CONFIG: exit %d, want 1 (the flag's DSN used)\n%s", code, out)
	}
	// An invalid file is an invalid configuration: exit 4.
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("primary {\n  cores = \"two\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI("holds", "--config", bad); code != exitConfig {
		t.Fatalf("holds --config on an invalid file: exit %d, want 4\n%s", code, out)
	}
}
