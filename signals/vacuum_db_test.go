package signals

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/pgtest"
)

// Autovacuum forced onto a table with low thresholds, and slowed so that
// it stays there: vacuum_running names that table and no other, and when
// the worker is cancelled (and autovacuum turned off on the table) the
// table reads 0 again.
func TestAutovacuumOnATableIsSeenAndGoes(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	exec := func(sql string) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("DROP TABLE IF EXISTS vac_busy, vac_quiet")
	exec("CREATE TABLE vac_quiet (id int)")
	exec(`CREATE TABLE vac_busy (id int, pad text) WITH (autovacuum_enabled = off)`)
	exec("INSERT INTO vac_busy SELECT g, repeat('x', 200) FROM generate_series(1, 200000) g")
	exec("DELETE FROM vac_busy")
	t.Cleanup(func() {
		admin.Exec(ctx, "ALTER SYSTEM RESET autovacuum_naptime")
		admin.Exec(ctx, "SELECT pg_reload_conf()")
		admin.Exec(ctx, "ALTER TABLE vac_busy SET (autovacuum_enabled = off)")
		admin.Exec(ctx, "SELECT pg_cancel_backend(pid) FROM pg_stat_progress_vacuum WHERE relid = 'vac_busy'::regclass")
	})
	// A vacuum that sleeps 100 ms for every page's cost takes minutes on
	// these pages; autovacuum looks every second.
	exec("ALTER SYSTEM SET autovacuum_naptime = '1s'")
	exec("SELECT pg_reload_conf()")
	exec(`ALTER TABLE vac_busy SET (autovacuum_enabled = on, autovacuum_vacuum_threshold = 0,
		autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1)`)

	p := newPoller(t, c, nil)
	read := func(table string) (Sample, error) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		p.Tick(tctx)
		s, ok := VacuumOn(p.Snapshot(), table)
		if !ok || s.Err != nil {
			return s, fmt.Errorf("vacuum_running on %s unknown: %v", table, s.Err)
		}
		return s, nil
	}
	pgtest.Eventually(t, 30*time.Second, func() error {
		s, err := read("public.vac_busy")
		if err != nil {
			return err
		}
		if s.Value < 1 {
			return fmt.Errorf("vacuum_running on public.vac_busy = %v, want 1", s.Value)
		}
		return nil
	})
	if s, err := read("public.vac_quiet"); err != nil || s.Value != 0 {
		t.Fatalf("vacuum_running on public.vac_quiet = %+v, %v; want 0: no vacuum runs there", s, err)
	}

	exec("ALTER TABLE vac_busy SET (autovacuum_enabled = off)")
	exec("SELECT pg_cancel_backend(pid) FROM pg_stat_progress_vacuum WHERE relid = 'vac_busy'::regclass")
	pgtest.Eventually(t, 30*time.Second, func() error {
		s, err := read("public.vac_busy")
		if err != nil {
			return err
		}
		if s.Value != 0 {
			return fmt.Errorf("vacuum_running on public.vac_busy = %v after the cancel, want 0", s.Value)
		}
		return nil
	})
}
