package holds_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/throttle/hold"
)

// Issue 33, points 1 and 6, on the database path: the store refuses a
// reason or an actor that would forge a line, a ratio too small to start a
// batch and a TTL under a second, before any query: an error wrapping
// hold.ErrInvalid that names the problem, never the database's check
// constraint, and nothing written.
func TestStoreRefusesForgingTextAndOutOfBoundHolds(t *testing.T) {
	_, pool, db := setup(t)
	ctx := context.Background()
	var before int
	pool.QueryRow(ctx, "SELECT count(*) FROM throttled.holds").Scan(&before)
	request := func(mod func(*hold.Request)) hold.Request {
		r := hold.Request{Scope: hold.AllJobs(), Source: hold.SourceCLI, Reason: "deploy", Actor: "alice", TTL: time.Hour}
		mod(&r)
		return r
	}
	for _, tc := range []struct {
		r    hold.Request
		want string
	}{
		{request(func(r *hold.Request) {
			r.Reason = "deploy\nh99  all  pause  manual  token:admin  23h59m0s  FORGED LINE"
		}), "reason: control character U+000A at byte 6; reasons and actors are one printable line"},
		{request(func(r *hold.Request) { r.Actor = "mallory\n2026-12-05T23:40:00Z  hold_released  h9" }), "actor: control character U+000A at byte 7"},
		{request(func(r *hold.Request) { r.Reason = "\x1b]0;title\a" }), "reason: control character U+001B at byte 0"},
		{request(func(r *hold.Request) { r.Actor = "eve\u202e" }), "actor: bidirectional control U+202E at byte 3"},
		{request(func(r *hold.Request) { r.Ratio = 1e-320 }), "ratio 1e-320 is below the smallest accepted, 0.001"},
		{request(func(r *hold.Request) { r.TTL = time.Nanosecond }), "TTL 1ns is under the shortest accepted, 1s"},
		{request(func(r *hold.Request) { r.TTL = 999 * time.Microsecond }), "TTL 999µs is under the shortest accepted, 1s"},
	} {
		if h, err := db.Holds().Add(ctx, tc.r); !errors.Is(err, hold.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%+v) = %+v, %v; want hold.ErrInvalid saying %q", tc.r, h, err, tc.want)
		}
	}
	var after int
	pool.QueryRow(ctx, "SELECT count(*) FROM throttled.holds").Scan(&after)
	if after != before {
		t.Errorf("%d holds written by refused requests", after-before)
	}
	// A release's reason and actor, and the cluster's settings, the same.
	h, err := db.Holds().Add(ctx, request(func(*hold.Request) {}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().Release(ctx, h.ID, "bob", hold.SourceCLI, "done\nh1  all  FORGED"); !errors.Is(err, hold.ErrInvalid) ||
		!strings.Contains(err.Error(), "reason: control character U+000A at byte 4") {
		t.Errorf("Release with a newline in its reason = %v; want hold.ErrInvalid naming it", err)
	}
	if _, err := db.Holds().Release(ctx, h.ID, "bob\r", hold.SourceCLI, "done"); !errors.Is(err, hold.ErrInvalid) ||
		!strings.Contains(err.Error(), "actor: control character U+000D at byte 3") {
		t.Errorf("Release with a CR in its actor = %v; want hold.ErrInvalid naming it", err)
	}
	if _, err := db.Holds().Release(ctx, h.ID, "bob", hold.SourceCLI, "done"); err != nil {
		t.Fatal(err)
	}
}

// Issue 33, point 7: what the cluster knows of, for the doors to refuse an
// exemption from a signal nothing knows and to warn of a job no process
// has registered. A worker's job and the custom signals it declares are
// known; a job with a checkpoint is known.
func TestRegistryKnowsRegisteredJobsAndSignals(t *testing.T) {
	_, pool, db := setup(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO throttled.workers (id, job, signals) VALUES ('known-test/1', 'known_worker_job', '{queue_depth,vacuum_running}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO throttled.checkpoints (job) VALUES ('known_checkpoint_job') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DELETE FROM throttled.workers WHERE id = 'known-test/1'")
		pool.Exec(context.Background(), "DELETE FROM throttled.checkpoints WHERE job = 'known_checkpoint_job'")
	})
	jobs, err := db.Registry().Jobs(ctx)
	if err != nil || !slices.Contains(jobs, "known_worker_job") || !slices.Contains(jobs, "known_checkpoint_job") {
		t.Fatalf("Registry().Jobs = %v, %v; want the worker's and the checkpoint's", jobs, err)
	}
	for _, tc := range []struct {
		sc    hold.Scope
		known []string
		warns string
	}{
		{hold.OneJob("nosuchjob"), nil, `no process has registered job "nosuchjob"`},
		{hold.Group("nosuch_"), nil, `no process has registered a job whose name starts with "nosuch_"`},
		{hold.OneJob("known_worker_job"), nil, ""},
		{hold.OneJob("known_checkpoint_job"), nil, ""},
		{hold.Group("known_"), nil, ""},
		{hold.OneJob("configured"), []string{"configured"}, ""},
		{hold.AllJobs(), nil, ""},
	} {
		ws, err := db.Registry().ScopeWarnings(ctx, tc.sc, tc.known)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(ws, "; "); (tc.warns == "") != (got == "") || !strings.Contains(got, tc.warns) {
			t.Errorf("ScopeWarnings(%s) = %q; want %q", tc.sc, got, tc.warns)
		}
	}
	for _, tc := range []struct {
		name   string
		custom []string
		ok     bool
	}{
		{"replica_lag_seconds", nil, true},
		{"queue_depth", nil, true}, // a worker declares it
		{"configured_signal", []string{"configured_signal"}, true},
		{"no_such_signal", []string{"configured_signal"}, false},
		{"", nil, true},
	} {
		err := db.Registry().CheckExempt(ctx, tc.name, tc.custom)
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckExempt(%q) = %v; want it known", tc.name, err)
		case !tc.ok && (!errors.Is(err, hold.ErrInvalid) || !strings.Contains(err.Error(), `exempt "no_such_signal": no such signal`) ||
			!strings.Contains(err.Error(), "replica_lag_seconds, replica_replay_backlog_bytes") ||
			!strings.HasSuffix(err.Error(), "custom signals known: configured_signal, queue_depth")):
			t.Errorf("CheckExempt(%q) = %v; want hold.ErrInvalid naming the signals known", tc.name, err)
		}
	}
	if err := holds.CheckExempt("no_such_signal", nil); err == nil || !strings.Contains(err.Error(), "custom signals known: none") {
		t.Errorf("CheckExempt without a database = %v", err)
	}
}
