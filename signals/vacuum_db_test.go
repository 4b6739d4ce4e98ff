package signals

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
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

// An anti-wraparound autovacuum, forced by a table's own
// autovacuum_freeze_max_age at its least (100 000) and 110 000 transaction
// IDs spent in subtransactions, is counted in antiwraparound_vacuums, and
// is gone once cancelled.
func TestAntiWraparoundVacuumIsCounted(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	exec := func(sql string) {
		t.Helper()
		qctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if _, err := admin.Exec(qctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("DROP TABLE IF EXISTS vac_old, vac_burn")
	exec("CREATE TABLE vac_old (id int, pad text) WITH (autovacuum_enabled = off)")
	exec("INSERT INTO vac_old SELECT g, repeat('x', 200) FROM generate_series(1, 100000) g")
	exec("CREATE TABLE vac_burn (id int)")
	t.Cleanup(func() {
		admin.Exec(ctx, "ALTER SYSTEM RESET autovacuum_naptime")
		admin.Exec(ctx, "SELECT pg_reload_conf()")
		admin.Exec(ctx, "SELECT pg_cancel_backend(pid) FROM pg_stat_progress_vacuum WHERE relid = 'vac_old'::regclass")
		admin.Exec(ctx, "DROP TABLE IF EXISTS vac_old, vac_burn")
	})
	// Each subtransaction that writes takes a transaction ID of its own.
	exec(`DO $$ BEGIN FOR i IN 1..110000 LOOP BEGIN INSERT INTO vac_burn VALUES (i); EXCEPTION WHEN others THEN NULL; END; END LOOP; END $$`)
	exec("ALTER SYSTEM SET autovacuum_naptime = '1s'")
	exec("SELECT pg_reload_conf()")
	// Anti-wraparound vacuums run even with autovacuum_enabled off.
	exec(`ALTER TABLE vac_old SET (autovacuum_freeze_max_age = 100000, autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1)`)

	p := newPoller(t, c, nil)
	waitValue(t, p, 60*time.Second, AntiWraparoundVacuums, "", false, ">=", 1)
	if s, ok := VacuumOn(p.Snapshot(), "public.vac_old"); !ok || s.Value < 1 {
		t.Errorf("vacuum_running on public.vac_old = %+v, %v; want the anti-wraparound vacuum counted there too", s, ok)
	}
	// Undone by dropping the table: an anti-wraparound vacuum does not
	// yield its lock, and the launcher starts it again within a second of a
	// cancel, so cancel and drop (under a lock timeout) until the drop wins.
	pgtest.Eventually(t, 30*time.Second, func() error {
		if _, err := admin.Exec(ctx, "SELECT pg_cancel_backend(pid) FROM pg_stat_progress_vacuum WHERE relid = 'vac_old'::regclass"); err != nil {
			return err
		}
		_, err := admin.Exec(ctx, "SET lock_timeout = '200ms'; DROP TABLE vac_old; RESET lock_timeout")
		return err
	})
	waitValue(t, p, 30*time.Second, AntiWraparoundVacuums, "", false, "==", 0)
}
