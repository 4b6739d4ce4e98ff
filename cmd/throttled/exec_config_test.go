package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// execConfigArgs runs exec on --config path: the sampling primary, its
// cores and everything that paces from the file, the statement as the
// admin role, deleting table's old rows fast when nothing holds it.
func execConfigArgs(c *pgcluster.Cluster, path, job, table string, extra ...string) []string {
	return append([]string{"exec", "--config", path, "--job-dsn", c.Primary.DSN(pgcluster.RoleAdmin), "--job", job,
		"--sql", fmt.Sprintf(deleteOld, table), "--max-rate", "20", "--initial-rate", "20", "--batch-size", "500", "--max-batch-size", "500", "--timeout", "15s"}, extra...)
}

// exec --config honours the file's Prometheus signals as run does: a
// required one whose Prometheus cannot be reached keeps the job from
// starting, and nothing is deleted; one whose rule is not required does
// not. Before exec read the prometheus blocks, the first deleted every
// row: a file that said "pause on the application's latency" protected
// nothing. The sidecar's API secrets (its tokens, its notifier's) are not
// set: exec needs only the secrets of what it honours.
func TestExecConfigPrometheusSignal(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	down := "http://" + freeAddr(t) // nothing listens there

	t.Run("required, unreachable: refused, nothing deleted", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "throttled.hcl")
		writeConfig(t, path, c, freeAddr(t), pgcluster.ReplicaName, optionalPromHCL(down, true))
		old := oldNew(t, admin, "exec_cfg_prom", 4000)
		r := runCmd(execConfigArgs(c, path, "exec-cfg-prom", "exec_cfg_prom")...)
		if r.code != exitError || !strings.Contains(r.out, `"api_p99"`) || !strings.Contains(r.out, path+":") {
			t.Errorf("exit %d, want 1 and a refusal naming api_p99 at its file:line:\n%s", r.code, r.out)
		}
		if n := oldCount(t, admin, "exec_cfg_prom"); n != old {
			t.Fatalf("%d of %d old rows deleted with a required Prometheus signal unreadable", old-n, old)
		}
	})
	t.Run("not required, unreachable: runs", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "throttled.hcl")
		writeConfig(t, path, c, freeAddr(t), pgcluster.ReplicaName, optionalPromHCL(down, false))
		oldNew(t, admin, "exec_cfg_opt", 4000)
		r := runCmd(execConfigArgs(c, path, "exec-cfg-opt", "exec_cfg_opt")...)
		if r.code != exitOK {
			t.Fatalf("exit %d, want 0: a signal no required rule reads never keeps exec from starting:\n%s", r.code, r.out)
		}
		if n := oldCount(t, admin, "exec_cfg_opt"); n != 0 {
			t.Fatalf("%d old rows left", n)
		}
	})
}

// exec --config pauses and paces by what the file says of its job: a
// maintenance window the job avoids, in force now, holds it; a job rule
// on a custom signal over its target shuts it. Neither deletes a row,
// and each says why in its progress; SIGINT then ends it (130). Before
// exec read them, both deleted every row.
func TestExecConfigPausesAndGates(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	for _, tc := range []struct {
		name, job, table, extra string
		// want is what a progress line says while the job waits.
		want func(execProgress) bool
	}{
		{
			name: "a maintenance window in force", job: "exec-cfg-maint", table: "exec_cfg_maint",
			extra: `maintenance "always" {
  window = "00:00-24:00 UTC"
}
job "exec-cfg-maint" {
  avoid = ["always"]
}
`,
			want: func(p execProgress) bool {
				return p.State == "paused" && strings.Contains(p.Reason, "maintenance:always")
			},
		},
		{
			name: "a job rule over its target", job: "exec-cfg-gate", table: "exec_cfg_gate",
			extra: `custom_signal "always_one" {
  query = "SELECT 1"
  every = "500ms"
}
signal "always_one" {
  target = 0
}
job "exec-cfg-gate" {
  signals = ["always_one"]
}
`,
			want: func(p execProgress) bool {
				return p.State == "paused" && strings.Contains(p.Reason, "gated: always_one")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "throttled.hcl")
			writeConfig(t, path, c, freeAddr(t), pgcluster.ReplicaName, tc.extra)
			old := oldNew(t, admin, tc.table, 4000)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &syncBuffer{}
			done := make(chan int, 1)
			go func() { done <- run(ctx, execConfigArgs(c, path, tc.job, tc.table, "--json"), out, out) }()
			waitProgress(t, out, done, 45*time.Second, tc.want)
			cancel()
			var code int
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("exec did not stop within 30s of SIGINT")
			}
			if code != exitInterrupted {
				t.Errorf("exit %d, want %d (interrupted):\n%s", code, exitInterrupted, out.String())
			}
			if n := oldCount(t, admin, tc.table); n != old {
				t.Fatalf("%d of %d old rows deleted while the file held the job:\n%s", old-n, old, out.String())
			}
		})
	}
}

// waitProgress waits until a progress line of exec --json's out says
// want, failing at once when exec ends first (its exit code put back on
// done) or when timeout passes.
func waitProgress(t *testing.T, out *syncBuffer, done chan int, timeout time.Duration, want func(execProgress) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, line := range strings.Split(out.String(), "\n") {
			var p execProgress
			if json.Unmarshal([]byte(line), &p) == nil && want(p) {
				return
			}
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("exec ended (exit %d) before a progress line said the job waits:\n%s", code, out.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress line within %s says the job waits:\n%s", timeout, out.String())
		}
	}
}

// parseExecConfig parses exec's flags with --config's file src and the
// environment env, and returns what exec would open and run.
func parseExecConfig(t *testing.T, src string, env map[string]string, flags ...string) (throttled.Options, jobs.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "throttled.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", path, "--job", probeJob, "--sql", "DELETE FROM t WHERE id IN (SELECT id FROM t LIMIT $1)"}, flags...)
	o, err := parseExecFlags(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		return throttled.Options{}, jobs.Config{}, err
	}
	return o.openOptions(o.windows(), hclog.NewNullLogger()), o.jobConfig(), nil
}

// A flag given, or its variable set, beats --config's file where both say
// something; the file fills in what they leave out.
func TestExecConfigFlagsWin(t *testing.T) {
	src := probePrimary + `replica "r2" {
  policy = "ignored"
}
pgbouncer {
  dsn = "postgres://monitor@pgb:6432/pgbouncer"
}
signal "foreground_latency" {
  target = 1.3
}
custom_signal "queue_depth" {
  query = "SELECT 1"
}
signal "queue_depth" {
  target = 5
}
controller {
  max_budget   = 7
  quiet_period = "9s"
}
job "probe" {
  max_rate       = 3
  min_batch_size = 200
  max_batch_size = 500
  tables         = ["public.t"]
  signals        = ["queue_depth"]
}
`
	t.Run("the file alone", func(t *testing.T) {
		opts, job, err := parseExecConfig(t, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := opts.Controller
		if c.MaxBudget != 7 || c.InitialBudget != 0.75 || c.QuietPeriod != 9*time.Second || c.Rules[signals.ForegroundLatency].Target != 1.3 || opts.NoForegroundLatency {
			t.Errorf("budget %v (initial %v), quiet %s, foreground latency %+v (off %v)", c.MaxBudget, c.InitialBudget, c.QuietPeriod, c.Rules[signals.ForegroundLatency], opts.NoForegroundLatency)
		}
		if job.MaxRate != 3 || job.InitialBatchSize != 200 || !slices.Equal(job.Tables, []string{"public.t"}) || !slices.Equal(job.Signals, []string{"queue_depth"}) {
			t.Errorf("job %+v", job)
		}
		if opts.Signals.PgBouncerDSN != "postgres://monitor@pgb:6432/pgbouncer" || len(opts.Signals.Replicas) != 0 {
			t.Errorf("PgBouncer %q, replicas sampled %v", opts.Signals.PgBouncerDSN, opts.Signals.Replicas)
		}
	})
	t.Run("flags and variables", func(t *testing.T) {
		opts, job, err := parseExecConfig(t, src, map[string]string{"THROTTLED_PGBOUNCER_DSN": "postgres://monitor@pgb2:6432/pgbouncer"},
			"--max-rate", "4", "--quiet-period", "5s", "--no-foreground-latency", "--replica", "r2", "--table", "public.u",
			"--min-batch-size", "10", "--max-batch-size", "20", "--pause-on-vacuum")
		if err != nil {
			t.Fatal(err)
		}
		c := opts.Controller
		if _, ok := c.Rules[signals.ForegroundLatency]; ok || !opts.NoForegroundLatency {
			t.Errorf("--no-foreground-latency: rules %v, off %v", c.Rules, opts.NoForegroundLatency)
		}
		if c.MaxBudget != 4 || c.InitialBudget != 1 || c.QuietPeriod != 5*time.Second {
			t.Errorf("budget %v (initial %v), quiet %s", c.MaxBudget, c.InitialBudget, c.QuietPeriod)
		}
		if c.Replicas["r2"] != throttle.ReplicaRequired || !slices.Equal(opts.Signals.Replicas, []string{"r2"}) {
			t.Errorf("--replica r2: policies %v, sampled %v", c.Replicas, opts.Signals.Replicas)
		}
		if opts.Signals.PgBouncerDSN != "postgres://monitor@pgb2:6432/pgbouncer" {
			t.Errorf("THROTTLED_PGBOUNCER_DSN: PgBouncer %q", opts.Signals.PgBouncerDSN)
		}
		if r, ok := c.JobRules[signals.VacuumRunning]; !ok || r.Target != 0 {
			t.Errorf("--pause-on-vacuum: job rules %v", c.JobRules)
		}
		if job.MaxRate != 4 || job.MinBatchSize != 10 || job.MaxBatchSize != 20 || job.InitialBatchSize != 20 ||
			!slices.Equal(job.Tables, []string{"public.u"}) || !slices.Equal(job.Signals, []string{"queue_depth", "vacuum_running"}) {
			t.Errorf("job %+v", job)
		}
	})
	t.Run("--foreground-latency beats foreground_latency = false", func(t *testing.T) {
		off := probePrimary + "controller {\n  foreground_latency = false\n}\n"
		opts, _, err := parseExecConfig(t, off, nil, "--foreground-latency", "1.5")
		if err != nil {
			t.Fatal(err)
		}
		if r := opts.Controller.Rules[signals.ForegroundLatency]; r.Target != 1.5 || !r.Required || opts.NoForegroundLatency {
			t.Errorf("rule %+v, off %v", r, opts.NoForegroundLatency)
		}
		if opts, _, _ := parseExecConfig(t, off, nil); !opts.NoForegroundLatency {
			t.Error("foreground_latency = false alone: the canary is on")
		}
	})
}

// exec needs the secrets of what it honours, and only those: an unset
// one it uses is a usage error naming it; the sidecar's (its tokens') and
// one a flag replaces need not be set.
func TestExecConfigSecrets(t *testing.T) {
	sidecar := `token "ops" {
  secret = env("EXEC_CFG_TEST_TOKEN")
  scopes = ["read"]
}
`
	if _, _, err := parseExecConfig(t, probePrimary+sidecar, nil); err != nil {
		t.Errorf("a token's secret unset: %v; exec uses none", err)
	}
	for _, tc := range []struct{ name, src, want string }{
		{"prometheus", probePrimary + `prometheus {
  address        = "http://127.0.0.1:9090"
  basic_user     = "throttled"
  basic_password = env("EXEC_CFG_TEST_PROM")
}
prometheus_signal "api_p99" {
  query = "max(app_p99_seconds)"
}
`, "basic_password is environment variable EXEC_CFG_TEST_PROM, which is not set"},
		{"coordination", `primary {
  dsn              = "postgres://monitor@db1:5432/app"
  coordination_dsn = env("EXEC_CFG_TEST_COORD")
  cores            = 3
}
`, "coordination_dsn is environment variable EXEC_CFG_TEST_COORD, which is not set"},
		{"pgbouncer", probePrimary + "pgbouncer {\n  dsn = env(\"EXEC_CFG_TEST_PGB\")\n}\n", "the pgbouncer's dsn is environment variable EXEC_CFG_TEST_PGB, which is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseExecConfig(t, tc.src, nil)
			if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v; want a usage error saying %q", err, tc.want)
			}
		})
	}
	// The primary's DSN unset, and --primary-dsn given: the flag's is used.
	unsetPrimary := strings.Replace(probePrimary, `"postgres://monitor@db1:5432/app"`, `env("EXEC_CFG_TEST_PRIMARY")`, 1)
	opts, _, err := parseExecConfig(t, unsetPrimary, nil, "--primary-dsn", "postgres://monitor@db9:5432/app")
	if err != nil || opts.PrimaryDSN != "postgres://monitor@db9:5432/app" {
		t.Errorf("--primary-dsn beside an unset dsn: %q, %v", opts.PrimaryDSN, err)
	}
}
