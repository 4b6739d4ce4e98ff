package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
)

// status --addr prints, leader or not, each configured job with where
// its time went in that process.
func TestStatusPrintsWhereEachJobsTimeWent(t *testing.T) {
	jobs := []api.Job{
		{Job: "purge", State: "throttled", Code: "cut", Rate: 0.5, WhySlow: "ran 4m10s: 81 % limited by foreground_latency, 12 % at full rate, 7 % slow start"},
		{Job: "archive", State: "paused", Code: "unavailable"},
	}
	for _, st := range []api.Status{
		{Leader: true, ConfigVersion: "v1", Jobs: jobs, Decision: &api.Decision{Mode: "throttled", Budget: 0.5, Binding: "foreground_latency", Reason: "cut"}},
		{Leader: false, ConfigVersion: "v1", Jobs: jobs},
	} {
		var out bytes.Buffer
		printSidecarStatus(&out, st)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var purge, archive string
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "purge "):
				purge = l
			case strings.HasPrefix(l, "archive "):
				archive = l
			}
		}
		if !strings.Contains(out.String(), "WHERE THE TIME WENT") || !strings.HasSuffix(purge, jobs[0].WhySlow) ||
			!strings.Contains(purge, "cut") || !strings.HasSuffix(archive, " -") {
			t.Errorf("leader %v: status:\n%s", st.Leader, out.String())
		}
		if st.Leader != strings.Contains(out.String(), "mode: throttled") {
			t.Errorf("leader %v: the decision shown or not:\n%s", st.Leader, out.String())
		}
	}
}

// status read from the database (no --addr) says where each coordinated
// worker's time went too, from the seconds its heartbeat wrote, and
// --json carries them.
func TestStatusFromTheDatabaseSaysWhereTheTimeWent(t *testing.T) {
	_, dsn := noHolds(t)
	admin := pgtest.Connect(t, pgtest.Cluster(t).Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `INSERT INTO throttled.workers (id, job, state, code, reason, limited_seconds)
		VALUES ('why-test/1', 'purge', 'throttled', 'binding', 'throttled: foreground_latency at 0.95 of target', '{"full_rate": 12, "foreground_latency": 81, "slow_start": 7}')`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DELETE FROM throttled.workers WHERE id = 'why-test/1'") })
	code, out, errOut := runCLI("status", "--primary-dsn", dsn)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "why-test/1 (purge): ran 1m40s: 81 % limited by foreground_latency, 12 % at full rate, 7 % slow start"; !strings.Contains(out, want) {
		t.Errorf("status lacks %q:\n%s", want, out)
	}
	code, out, errOut = runCLI("status", "--primary-dsn", dsn, "--json")
	if code != exitOK || !strings.Contains(out, `"LimitedSeconds":{`) || !strings.Contains(out, `"foreground_latency":81`) {
		t.Errorf("status --json: exit %d %s\n%s", code, errOut, out)
	}
}

// status read from the database shows the leader's binding as its
// sample's key, made from the signal's name and labels the leader
// stored apart, and --json carries the name and labels themselves, so a
// program never parses the key.
func TestStatusFromTheDatabaseShowsTheBindingsLabels(t *testing.T) {
	_, dsn := noHolds(t)
	admin := pgtest.Connect(t, pgtest.Cluster(t).Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `INSERT INTO throttled.leader (id, leader, budget, mode, binding, binding_labels, reason)
		VALUES (1, 'binding-test', 0.5, 'throttled', 'replica_lag_seconds', '{"replica": "r1"}', 'cut')
		ON CONFLICT (id) DO UPDATE SET leader = 'binding-test', budget = 0.5, mode = 'throttled', binding = 'replica_lag_seconds',
			binding_labels = '{"replica": "r1"}', reason = 'cut', published_at = now()`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DELETE FROM throttled.leader") })
	code, out, errOut := runCLI("status", "--primary-dsn", dsn)
	if code != exitOK || !strings.Contains(out, `binding replica_lag_seconds{replica="r1"}`) {
		t.Errorf("status: exit %d %s\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI("status", "--primary-dsn", dsn, "--json")
	if code != exitOK || !strings.Contains(out, `"Binding":"replica_lag_seconds{replica=\"r1\"}","BindingSignal":"replica_lag_seconds","BindingLabels":{"replica":"r1"}`) {
		t.Errorf("status --json: exit %d %s\n%s", code, errOut, out)
	}
}
