package coord_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/throttle/hold"
)

// RequestResume, from any process or the CLI, marks the leader's row with
// the request and who made it, and audits it with the reason (event mode,
// source manual). With no latched pause published it answers
// ErrNotLatched, and neither asks nor audits.
func TestRequestResumeAsksTheLeaderAndAudits(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := holds.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	db, err := holds.New(pool, holds.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DELETE FROM throttled.leader") })
	publish := func(latched bool) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO throttled.leader (id, leader, budget, mode, binding, reason, critical_signal, critical_since, latched)
			VALUES (1, 'resume-test', 0, 'critical', 'primary_load', 'critical', 'primary_load', now(), $1)
			ON CONFLICT (id) DO UPDATE SET latched = $1, resume_requested_at = NULL, resume_by = NULL`, latched); err != nil {
			t.Fatal(err)
		}
	}
	requested := func() (bool, string) {
		t.Helper()
		var ok bool
		var by string
		if err := pool.QueryRow(ctx, "SELECT resume_requested_at IS NOT NULL, coalesce(resume_by, '') FROM throttled.leader").Scan(&ok, &by); err != nil {
			t.Fatal(err)
		}
		return ok, by
	}
	audited := func(since time.Time) []holds.Entry {
		t.Helper()
		es, err := db.Audit().Since(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		var out []holds.Entry
		for _, e := range es {
			if e.Event == holds.EventMode && e.Actor == "alice" {
				out = append(out, e)
			}
		}
		return out
	}
	var start time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&start); err != nil {
		t.Fatal(err)
	}

	publish(false)
	if err := coord.RequestResume(ctx, db, "alice", "load is back"); !errors.Is(err, coord.ErrNotLatched) {
		t.Fatalf("with no latch: %v; want ErrNotLatched", err)
	}
	if ok, _ := requested(); ok {
		t.Error("with no latch the leader's row carries a request")
	}
	if es := audited(start); len(es) != 0 {
		t.Errorf("with no latch, audited %+v; want nothing", es)
	}

	publish(true)
	if err := coord.RequestResume(ctx, db, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if ok, by := requested(); !ok || by != "alice" {
		t.Errorf("the leader's row: requested %v by %q; want true by alice", ok, by)
	}
	es := audited(start)
	if len(es) != 1 || es[0].Source != string(hold.SourceManual) || es[0].Reason != "resume of the latched critical pause requested: no reason given" {
		t.Fatalf("audited %+v; want one request, source manual, saying no reason was given", es)
	}
}
