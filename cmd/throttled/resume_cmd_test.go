package main

import (
	"context"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// resume --latched asks the leader, through the database, to end its
// latched critical pause: it says so, the leader's row carries the
// request and who made it, and the audit log the reason. With no latched
// pause it fails, naming why, and asks nothing.
func TestResumeLatchedThroughTheDatabase(t *testing.T) {
	_, dsn := noHolds(t)
	admin := pgtest.Connect(t, pgtest.Cluster(t).Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	t.Cleanup(func() { admin.Exec(context.Background(), "DELETE FROM throttled.leader") })
	set := func(latched bool) {
		t.Helper()
		if _, err := admin.Exec(ctx, `INSERT INTO throttled.leader (id, leader, budget, mode, binding, reason, critical_signal, critical_since, latched)
			VALUES (1, 'latch-test', 0, 'critical', 'primary_load', 'critical', 'primary_load', now(), $1)
			ON CONFLICT (id) DO UPDATE SET latched = $1, resume_requested_at = NULL, resume_by = NULL`, latched); err != nil {
			t.Fatal(err)
		}
	}
	requested := func() (bool, string) {
		t.Helper()
		var ok bool
		var by string
		if err := admin.QueryRow(ctx, "SELECT resume_requested_at IS NOT NULL, coalesce(resume_by, '') FROM throttled.leader").Scan(&ok, &by); err != nil {
			t.Fatal(err)
		}
		return ok, by
	}

	set(false)
	code, out, errOut := runCLI("resume", "--latched", "--primary-dsn", dsn, "--actor", "alice", "--reason", "load is back")
	if ok, _ := requested(); code == exitOK || ok || !strings.Contains(errOut, "no latched critical pause") {
		t.Errorf("no latch: exit %d, requested %v: %s%s", code, ok, out, errOut)
	}

	set(true)
	code, out, errOut = runCLI("resume", "--latched", "--primary-dsn", dsn, "--actor", "alice", "--reason", "load is back")
	if code != exitOK || !strings.Contains(out, "resume requested") {
		t.Fatalf("latched: exit %d: %s%s", code, out, errOut)
	}
	if ok, by := requested(); !ok || by != "alice" {
		t.Errorf("the leader's row: requested %v by %q; want true by alice", ok, by)
	}
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM throttled.audit WHERE actor = 'alice' AND reason LIKE '%latched critical pause requested: load is back'`).Scan(&n); err != nil || n == 0 {
		t.Errorf("audit: %d entries naming the request (%v)", n, err)
	}
	set(true)
	code, out, errOut = runCLI("resume", "--latched", "--primary-dsn", dsn, "--json")
	if code != exitOK || strings.TrimSpace(out) != `{"resume_requested":true}` {
		t.Errorf("--json: exit %d: %s%s", code, out, errOut)
	}
}
