package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// gated reports nil once p is paused by a gate whose reason holds want.
func gated(p throttled.JobPacer, want string) error {
	js := p.Status()
	st, r := js.State, js.Reason
	if st != status.JobPaused || !strings.HasPrefix(r, "gated: ") || !strings.Contains(r, want) {
		return fmt.Errorf("%s: %s; want gated on %s", st, r, want)
	}
	return nil
}

// End to end on the real pair, through throttled.Open: autovacuum forced
// onto the table one job writes pauses that job and no other; a custom
// signal over its target pauses the job that names it. Each is undone and
// the job runs again. The times are logged: they are the reaction times
// of the signals' table in docs/SIGNALS.md.
func TestJobRulesGateOnlyTheJobsTheyBind(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	exec := func(q string) {
		t.Helper()
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(qctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("DROP TABLE IF EXISTS gate_busy, gate_quiet, gate_queue")
	exec("CREATE TABLE gate_quiet (id int)")
	exec("CREATE TABLE gate_queue (id int)")
	exec("GRANT SELECT ON gate_queue TO " + pgcluster.RoleMonitor)
	exec("CREATE TABLE gate_busy (id int, pad text) WITH (autovacuum_enabled = off)")
	exec("INSERT INTO gate_busy SELECT g, repeat('x', 200) FROM generate_series(1, 200000) g")
	exec("DELETE FROM gate_busy")
	t.Cleanup(func() {
		admin.Exec(ctx, "ALTER SYSTEM RESET autovacuum_naptime")
		admin.Exec(ctx, "SELECT pg_reload_conf()")
		admin.Exec(ctx, "ALTER TABLE gate_busy SET (autovacuum_enabled = off)")
		admin.Exec(ctx, "SELECT pg_cancel_backend(pid) FROM pg_stat_progress_vacuum WHERE relid = 'gate_busy'::regclass")
	})

	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		Signals: signals.Config{Custom: []signals.CustomSignal{{Name: "queue_depth", Query: "SELECT count(*) FROM gate_queue", Every: 500 * time.Millisecond}}},
		Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20, GateHold: time.Second, JobRules: map[signals.Name]throttle.Rule{
			signals.VacuumRunning: {Target: 0},
			"queue_depth":         {Target: 10, MaxAge: 3 * time.Second},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	busy, err := tc.Pacer(jobs.Config{Name: "purge-busy", Tables: []string{"gate_busy"}, Signals: []string{"vacuum_running"}})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := tc.Pacer(jobs.Config{Name: "purge-quiet", Tables: []string{"public.gate_quiet"}})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error { return clienttest.Running(busy) })
	pgtest.Eventually(t, 20*time.Second, func() error { return clienttest.Running(quiet) })

	// Autovacuum on gate_busy: a vacuum sleeping 100 ms per page's cost.
	exec("ALTER SYSTEM SET autovacuum_naptime = '1s'")
	exec("SELECT pg_reload_conf()")
	exec(`ALTER TABLE gate_busy SET (autovacuum_enabled = on, autovacuum_vacuum_threshold = 0,
		autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1)`)
	started := waitVacuum(t, admin, "gate_busy")
	pgtest.Eventually(t, 10*time.Second, func() error { return gated(busy, `vacuum_running{table="public.gate_busy"}`) })
	t.Logf("reaction: vacuum on the job's table → job gated in %s", time.Since(started).Round(10*time.Millisecond))
	if err := clienttest.Running(quiet); err != nil {
		t.Errorf("purge-quiet, which never touches gate_busy: %v; want running", err)
	}
	// The metrics carry the table, and every series once.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tc.Collector())
	pgtest.Eventually(t, 5*time.Second, func() error {
		fams, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, f := range fams {
			if f.GetName() != "throttled_signals_vacuum_running" {
				continue
			}
			for _, m := range f.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "public.gate_busy" && m.GetGauge().GetValue() >= 1 {
					return nil
				}
			}
		}
		return errors.New(`no throttled_signals_vacuum_running{table="public.gate_busy"} >= 1`)
	})
	exec("ALTER TABLE gate_busy SET (autovacuum_enabled = off)")
	exec("SELECT pg_cancel_backend(pid) FROM pg_stat_progress_vacuum WHERE relid = 'gate_busy'::regclass")
	ended := time.Now()
	pgtest.Eventually(t, 15*time.Second, func() error { return clienttest.Running(busy) })
	t.Logf("reaction: vacuum ended → job running in %s (gate_hold 1s)", time.Since(ended).Round(10*time.Millisecond))

	// The custom signal: purge-quiet is bound by every job rule, purge-busy
	// only by vacuum_running.
	exec("INSERT INTO gate_queue SELECT generate_series(1, 50)")
	filled := time.Now()
	pgtest.Eventually(t, 10*time.Second, func() error { return gated(quiet, "queue_depth at 50, over 10") })
	t.Logf("reaction: custom signal over target → job gated in %s (every 500ms)", time.Since(filled).Round(10*time.Millisecond))
	if err := clienttest.Running(busy); err != nil {
		t.Errorf("purge-busy, which names only vacuum_running: %v; want running", err)
	}
	if n, err := testutil.GatherAndCount(reg, "throttled_signals_value"); err != nil || n == 0 {
		t.Errorf("gather: %d series, %v", n, err)
	}
	exec("DELETE FROM gate_queue")
	pgtest.Eventually(t, 10*time.Second, func() error { return clienttest.Running(quiet) })
}

// waitVacuum waits until a vacuum runs on table and returns when it was
// first seen.
func waitVacuum(t *testing.T, admin *pgx.Conn, table string) time.Time {
	t.Helper()
	pgtest.Eventually(t, 30*time.Second, func() error {
		var n int
		if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_progress_vacuum WHERE relid = $1::regclass", table).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no vacuum on %s yet", table)
		}
		return nil
	})
	return time.Now()
}
