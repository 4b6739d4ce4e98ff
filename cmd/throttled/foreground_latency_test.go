package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/jackc/pgx/v5"
	"io"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/signals"
)

func TestForegroundLatencyFlags(t *testing.T) {
	base := []string{"--primary-dsn", "postgres://h/db", "--cores", "2", "--job", "purge", "--sql", "DELETE FROM t WHERE id IN (SELECT id FROM t LIMIT $1)"}
	if o, err := parseExecFlags(base, noEnv, io.Discard); err != nil || o.foregroundLatency != 0 || o.noLatency {
		t.Fatalf("exec without the flag: %v, %v, %v; want the default (on where the canary runs)", o.foregroundLatency, o.noLatency, err)
	}
	if o, err := parseExecFlags(append(base, "--no-foreground-latency"), noEnv, io.Discard); err != nil || !o.noLatency {
		t.Fatalf("exec --no-foreground-latency: %v, %v; want off", o.noLatency, err)
	}
	if _, err := parseExecFlags(append(base, "--no-foreground-latency", "--foreground-latency", "1.5"), noEnv, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--foreground-latency 1.5 and --no-foreground-latency: one or the other") {
		t.Fatalf("exec with both: %v; want refused, naming both", err)
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

// exec paces on the foreground's latency by default where the canary can
// run (the job's DSN has migrated throttled's schema here), at the target
// --foreground-latency gives, and not with --no-foreground-latency; either
// way the job cleans every row. The canary's baseline comes first: the
// log says when it is known, before any batch of a job it paces.
func TestExecPacesOnForegroundLatency(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	for _, tc := range []struct {
		name  string
		flags []string
		on    bool
		auto  bool
	}{
		{"by default", nil, true, true},
		{"at a target", []string{"--foreground-latency", "3"}, true, false},
		{"off", []string{"--no-foreground-latency"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := oldNew(t, admin, "exec_fg", 20_000)
			var out, errOut bytes.Buffer
			args := append(execArgs(c, "exec-fg", "exec_fg", "--solo", "--max-rate", "50", "--initial-rate", "50", "--batch-size", "2000"), tc.flags...)
			if code := run(context.Background(), args, &out, &errOut); code != exitOK {
				t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
			}
			if left := oldCount(t, admin, "exec_fg"); left != 0 || old == 0 {
				t.Fatalf("%d of %d old rows left", left, old)
			}
			logs := errOut.String()
			if got := strings.Contains(logs, "foreground latency baseline known"); got != tc.on {
				t.Errorf("canary's baseline logged %v; want %v:\n%s", got, tc.on, logs)
			}
			if got := strings.Contains(logs, "pacing on foreground latency too"); got != tc.auto {
				t.Errorf("the default rule logged %v; want %v:\n%s", got, tc.auto, logs)
			}
		})
	}
}

// Where the canary cannot run (here the sampling role may not write its
// table), exec paces without it and the log says why; asked for a target
// it refuses to start, naming the grant.
func TestExecWhereTheCanaryCannotRun(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE DATABASE no_canary"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE no_canary WITH (FORCE)") })
	dsn := func(role string) string { return strings.Replace(c.Primary.DSN(role), "/postgres?", "/no_canary?", 1) }
	db, err := pgx.Connect(ctx, dsn(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := schema.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "REVOKE UPDATE ON throttled.canary FROM pg_monitor"); err != nil {
		t.Fatal(err)
	}
	base := []string{"exec", "--primary-dsn", dsn(pgcluster.RoleMonitor), "--job-dsn", dsn(pgcluster.RoleAdmin), "--cores", "2", "--job", "nc",
		"--solo", "--sql", "SELECT 1 WHERE $1::int < 0", "--max-rate", "50", "--initial-rate", "50"}
	var out, errOut bytes.Buffer
	if code := run(ctx, base, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if logs := errOut.String(); !strings.Contains(logs, "foreground latency off: the canary cannot run on this primary") || !strings.Contains(logs, "may not write throttled.canary") ||
		strings.Contains(logs, "pacing on foreground latency too") {
		t.Errorf("exec without a writable canary table logged:\n%s\nwant the canary off, saying why", logs)
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(base, "--foreground-latency", "3"), &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "may not write throttled.canary") {
		t.Errorf("exec --foreground-latency 3 without a writable canary table: exit %d\n%s", code, errOut.String())
	}
}
