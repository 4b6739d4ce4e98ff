package throttled_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// Each condition an expert would watch, induced on the real pair while a
// job runs under throttled.Open with a rule on its signal, and undone:
// the job must be cut (or paused) with the right signal binding, then run
// again. The reaction times are logged as table rows (go test -run
// TestReactionToInducedConditions -v .); the closing note of issue 13
// quotes them.
func TestReactionToInducedConditions(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	exec := func(conn *pgx.Conn, q string, args ...any) {
		t.Helper()
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := conn.Exec(qctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	bouncer, err := c.StartPgBouncer(ctx, pgcluster.PgBouncerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bouncer.Stop()
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		Signals: signals.Config{PgBouncerDSN: bouncer.AdminDSN(pgcluster.RoleMonitor)},
		Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20, Rules: map[signals.Name]throttle.Rule{
			signals.XminHorizonAgeXIDs:         {Target: 100},
			signals.SlotRetainedBytesMax:       {Target: 4 << 20},
			signals.PgBouncerWaitingClientsMax: {Target: 1},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// A job that takes every batch it is given.
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, err := tc.Pacer(jobs.Config{Name: "react"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := jobs.New(jobs.Config{Name: "react"}, pool, p, func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		_, err := tx.Exec(ctx, "SELECT pg_sleep(0.002)")
		return jobs.Result{Rows: 1}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	jctx, stopJob := context.WithCancel(ctx)
	defer stopJob()
	go j.Run(jctx)
	calm := func() error {
		if err := clienttest.Running(p); err != nil {
			return err
		}
		js := p.Status()
		st, r := js.State, js.Reason
		if st != status.JobRunning {
			return fmt.Errorf("%s: %s", st, r)
		}
		return nil
	}
	pgtest.Eventually(t, 30*time.Second, calm)
	// reacts waits until the decision binds on signal with the job held
	// back, and returns how long that took.
	reacts := func(signal string) time.Duration {
		t.Helper()
		start := time.Now()
		pgtest.Eventually(t, 20*time.Second, func() error {
			d := tc.Decision()
			js := p.Status()
			st := js.State
			if d.Binding.String() != signal || st == status.JobRunning {
				return fmt.Errorf("binding %q, job %s (%s); want the job held back on %s", d.Binding, st, d.Reason, signal)
			}
			return nil
		})
		return time.Since(start)
	}
	recovers := func() time.Duration {
		t.Helper()
		start := time.Now()
		pgtest.Eventually(t, 60*time.Second, calm)
		return time.Since(start)
	}
	row := func(condition, what string, react, back time.Duration) {
		t.Logf("| %s | %s | %.1f s | %.1f s |", condition, what, react.Seconds(), back.Seconds())
	}
	t.Logf("| condition induced | what the job did | reacted in | running again in |")

	// A REPEATABLE READ transaction sits while others burn transaction IDs.
	sitter := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	tx, err := sitter.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM pg_class"); err != nil {
		t.Fatal(err)
	}
	for range 300 {
		exec(admin, "SELECT pg_current_xact_id()")
	}
	r := reacts("xmin_horizon_age_xids")
	tx.Rollback(ctx)
	row("a session holds a snapshot, 300 XIDs pass (rule: xmin_horizon_age_xids target 100)", "cut, binding xmin_horizon_age_xids", r, recovers())

	// A logical slot nobody consumes, while 10 MB of WAL are written.
	const slot = "reaction_cdc"
	exec(admin, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", slot)
	t.Cleanup(func() { admin.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot) })
	exec(admin, `CREATE TABLE IF NOT EXISTS reaction_churn (id int, pad text)`)
	exec(admin, `INSERT INTO reaction_churn SELECT g, repeat('x', 500) FROM generate_series(1, 20000) g`)
	r = reacts("slot_retained_bytes_max")
	exec(admin, "SELECT pg_drop_replication_slot($1)", slot)
	exec(admin, "DROP TABLE reaction_churn")
	row("a logical slot nobody reads retains 10 MB of WAL (rule: slot_retained_bytes_max target 4 MiB)", "cut, binding slot_retained_bytes_max", r, recovers())

	// PgBouncer's pool full, two clients waiting.
	var held []pgx.Tx
	for range bouncer.PoolSize {
		conn, err := bouncer.Connect(ctx, pgcluster.RoleAdmin)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		held = append(held, tx)
	}
	waited := make(chan error, 2)
	for range 2 {
		go func() {
			conn, err := bouncer.Connect(ctx, pgcluster.RoleAdmin)
			if err == nil {
				_, err = conn.Exec(ctx, "SELECT 1")
				conn.Close(context.Background())
			}
			waited <- err
		}()
	}
	start := time.Now()
	pgtest.Eventually(t, 20*time.Second, func() error {
		d := tc.Decision()
		js := p.Status()
		st := js.State
		if st != status.JobPaused && d.Binding.String() != "pgbouncer_waiting_clients_max" {
			return fmt.Errorf("binding %q, job %s (%s); want it held back on the pool", d.Binding, st, d.Reason)
		}
		return nil
	})
	r = time.Since(start)
	what := fmt.Sprintf("%s, binding %s", tc.Decision().Mode, tc.Decision().Binding)
	for _, tx := range held {
		tx.Rollback(ctx)
	}
	for range 2 {
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
	}
	// A critical pause (the full pool is no connection headroom) waits out
	// its quiet period, 30 s by default.
	row("PgBouncer's pool of 4 full, 2 clients waiting (rule: pgbouncer_waiting_clients_max target 1; headroom counts the pool)", what, r, recovers())
}
