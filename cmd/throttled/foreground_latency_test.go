package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/pgtest"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/signals"
)

func TestForegroundLatencyFlags(t *testing.T) {
	base := []string{"--primary-dsn", "postgres://h/db", "--cores", "2", "--job", "purge", "--sql", "DELETE FROM t WHERE id IN (SELECT id FROM t LIMIT $1)"}
	if o, err := parseExecFlags(base, noEnv, io.Discard); err != nil || o.foregroundLatency != 0 {
		t.Fatalf("exec without the flag: %v, %v; want off", o.foregroundLatency, err)
	}
	if o, err := parseExecFlags(append(base, "--foreground-latency", "1.3"), noEnv, io.Discard); err != nil || o.foregroundLatency != 1.3 {
		t.Fatalf("exec --foreground-latency 1.3: %v, %v", o.foregroundLatency, err)
	}
	for _, v := range []string{"0.9", "1", "-2", "NaN", "Inf"} {
		if _, err := parseExecFlags(append(base, "--foreground-latency", v), noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "--foreground-latency is a multiple") {
			t.Errorf("exec --foreground-latency %s: %v; want refused", v, err)
		}
	}
	sig := []string{"--primary-dsn", "postgres://h/db", "--cores", "2"}
	if o, err := parseSignalsFlags(sig, noEnv, io.Discard); err != nil || o.cfg.ForegroundLatency {
		t.Fatalf("signals without the flag: %v, %v; want off", o.cfg.ForegroundLatency, err)
	}
	if o, err := parseSignalsFlags(append(sig, "--foreground-latency"), noEnv, io.Discard); err != nil || !o.cfg.ForegroundLatency {
		t.Fatalf("signals --foreground-latency: %v, %v; want on", o.cfg.ForegroundLatency, err)
	}
}

// `throttled signals --foreground-latency` shows the canary's latency at
// once and the ratio as an error until a baseline is learnt, and exits
// unsafe: an unknown signal is not a fine one.
func TestSignalsForegroundLatencyOnce(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := schema.Migrate(context.Background(), admin); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"signals", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor), "--cores", "2",
		"--foreground-latency", "--json"}, &out, &errOut)
	if code != exitUnsafe {
		t.Fatalf("exit %d; want %d (unsafe)\n%s\n%s", code, exitUnsafe, out.String(), errOut.String())
	}
	var snap jsonSnapshot
	if err := json.Unmarshal(out.Bytes(), &snap); err != nil {
		t.Fatal(err)
	}
	got := map[signals.Name]jsonSample{}
	for _, s := range snap.Signals {
		got[s.Name] = s
	}
	if s := got[signals.ForegroundLatencySeconds]; s.Error != nil || s.Raw == nil || !(*s.Raw > 0) || s.Unit != signals.UnitSeconds {
		t.Errorf("foreground_latency_seconds: %+v; want a latency in seconds", s)
	}
	if s := got[signals.ForegroundLatency]; s.Error == nil || !strings.Contains(*s.Error, "baseline not learnt") || s.Value != nil {
		t.Errorf("foreground_latency on one tick: %+v; want unknown, no baseline yet", s)
	}
}

// With --foreground-latency the job waits, paused on foreground_latency,
// until the canary has learnt its baseline on the idle primary; then it
// runs to the end.
func TestExecWithForegroundLatencyWaitsForTheBaseline(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	old := oldNew(t, admin, "exec_fg", 20_000)
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run(context.Background(), execArgs(c, "exec-fg", "exec_fg", "--solo", "--foreground-latency", "3",
		"--max-rate", "50", "--initial-rate", "50", "--batch-size", "2000"), &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if left := oldCount(t, admin, "exec_fg"); left != 0 || old == 0 {
		t.Fatalf("%d of %d old rows left", left, old)
	}
	// The first batch waits for a whole job-free window (10 s).
	if d := time.Since(start); d < signals.DefaultForegroundLatencyWindow {
		t.Errorf("done in %s; the job cannot have waited for the baseline", d)
	}
	if !strings.Contains(out.String(), "foreground_latency") {
		t.Errorf("progress never named foreground_latency while waiting:\n%s", out.String())
	}
}
