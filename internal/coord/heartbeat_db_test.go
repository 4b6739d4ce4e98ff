package coord

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// The heartbeat against the real pair, one beat at a time: the Engine
// never runs, so no leader publishes but the test, and nothing waits on a
// clock.

// noHolds is a hold source with no hold.
type noHolds struct{}

func (noHolds) Applying(time.Time, string) []hold.Hold { return nil }

// newEngine returns an Engine coordinating on dsn, closed when the test
// ends, and what its log says.
func newEngine(t *testing.T, dsn string) (*Engine, *pgtest.Buffer) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &pgtest.Buffer{}
	e := New(Deps{Log: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}), Pool: pool, Holds: noHolds{}, Tick: time.Second})
	t.Cleanup(e.Close)
	return e, logs
}

// adminEngine is newEngine as the superuser on the package's pair, its
// tables migrated, with a store on the same database to publish as a
// leader would.
func adminEngine(t *testing.T) (*Engine, *store.Store) {
	t.Helper()
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	e, _ := newEngine(t, c.Primary.DSN(pgcluster.RoleAdmin))
	return e, store.New(admin)
}

// publish writes w's lease as a leader would, for lease from now (in the
// past when negative).
func publish(t *testing.T, s *store.Store, w *worker, rate float64, lease time.Duration) {
	t.Helper()
	err := s.Publish(context.Background(), store.Publication{Leader: "test", Budget: rate, Mode: "running", Lease: lease,
		Workers: []store.WorkerLease{{ID: w.id, Rate: rate, Burst: 2, InFlight: 1, State: "running", Code: "running", Reason: "running: the test's lease"}}})
	if err != nil {
		t.Fatal(err)
	}
}

// A heartbeat applies the lease the leader published for the worker, and
// pauses it at once when that lease has ended; a new worker, never
// leased, waits for its first quietly.
func TestHeartbeatAppliesThePublishedLease(t *testing.T) {
	e, s := adminEngine(t)
	ctx := context.Background()
	w, err := e.Register(ctx, jobs.Config{Name: "beat-lease"})
	if err != nil {
		t.Fatal(err)
	}
	e.heartbeat(ctx)
	if st := w.Status(); !w.Unavailable() || st.Reason != "allocation lease expired: no leader renewed it" {
		t.Fatalf("never leased, the worker is %+v; want it waiting, unavailable, with no word of reachability", st)
	}

	publish(t, s, w, 4, time.Minute)
	e.heartbeat(ctx)
	st := w.Status()
	if st.State != status.JobRunning || st.Code != status.CodeRunning || st.Rate != 4 || st.Reason != "running: the test's lease" || w.Unavailable() {
		t.Fatalf("leased at 4/s, the worker is %+v", st)
	}
	if a := w.l.Allocation(); a.Rate != 4 || a.Burst != 2 || a.MaxInFlight != 1 {
		t.Errorf("the limiter applies %+v; want the published 4/s, burst 2, 1 in flight", a)
	}
	if open, reason := w.l.State(); !open {
		t.Errorf("leased, the limiter is closed: %s", reason)
	}

	publish(t, s, w, 4, -time.Second)
	e.heartbeat(ctx)
	if st := w.Status(); !w.Unavailable() || st.Reason != "allocation lease expired: no leader renewed it" {
		t.Fatalf("after an expired lease the worker is %+v; want it paused now, not at its old lease's end", st)
	}
	if open, _ := w.l.State(); open {
		t.Error("after an expired lease the limiter is open")
	}
}

// A heartbeat that fails pauses the worker at once, though its last lease
// runs a minute more, and says the database could not be reached.
func TestFailedHeartbeatPausesAtOnce(t *testing.T) {
	e, s := adminEngine(t)
	ctx := context.Background()
	w, err := e.Register(ctx, jobs.Config{Name: "beat-fails"})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, s, w, 4, time.Minute)
	e.heartbeat(ctx)
	if w.Unavailable() {
		t.Fatalf("leased, the worker is %+v", w.Status())
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	e.heartbeat(gone)
	st := w.Status()
	if !w.Unavailable() || !strings.HasPrefix(st.Reason, "no allocation: cannot reach the coordination database: ") {
		t.Fatalf("after a failed heartbeat the worker is %+v; want it paused, unreachable", st)
	}
	if open, _ := w.l.State(); open {
		t.Error("after a failed heartbeat the limiter is open")
	}
}

// A worker whose row was removed (as stale, by a leader, while it could
// not heartbeat) registers again at its next heartbeat, and waits for a
// lease of its new row.
func TestHeartbeatRegistersARemovedWorkerAgain(t *testing.T) {
	e, s := adminEngine(t)
	ctx := context.Background()
	w, err := e.Register(ctx, jobs.Config{Name: "beat-removed", Weight: 3})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, s, w, 4, time.Minute)
	e.heartbeat(ctx)
	if err := s.Delete(ctx, w.id); err != nil {
		t.Fatal(err)
	}
	e.heartbeat(ctx)
	if st := w.Status(); !w.Unavailable() || st.Reason != "allocation lease expired: no leader renewed it" {
		t.Fatalf("its row removed, the worker is %+v; want it waiting for a new lease", st)
	}
	live, err := s.LiveWorkers(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(live, func(l store.Live) bool { return l.ID == w.id })
	if i < 0 {
		t.Fatalf("the worker's row was not registered again: %+v", live)
	}
	if live[i].Job != "beat-removed" || live[i].Weight != 3 {
		t.Errorf("registered again as %+v; want job beat-removed, weight 3", live[i].Worker)
	}
}

// A heartbeat refused for want of a privilege pauses the worker with the
// GRANT that would let it, says so in the log once however many
// heartbeats are refused, and says once that they are accepted again.
func TestRefusedHeartbeatNamesTheGrantOnce(t *testing.T) {
	c := pgtest.Cluster(t)
	dsn, admin := NewCoordinatorRole(t, c)
	e, logs := newEngine(t, dsn)
	ctx := context.Background()
	w, err := e.Register(ctx, jobs.Config{Name: "beat-refused"})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, store.New(admin), w, 4, time.Minute)
	exec := func(q string) {
		t.Helper()
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	grant := "GRANT UPDATE ON throttled.workers TO " + CoordinatorRole
	t.Cleanup(func() { exec(grant) })
	exec("REVOKE UPDATE ON throttled.workers FROM " + CoordinatorRole)
	for range 3 {
		e.heartbeat(ctx)
		st := w.Status()
		if !w.Unavailable() {
			t.Fatalf("refused, the worker is %+v; want it paused, unavailable", st)
		}
		for _, want := range []string{"no allocation: ", "42501", "GRANT " + tablePrivileges[store.WorkersTable] + " ON " + store.WorkersTable, CoordinatorRole} {
			if !strings.Contains(st.Reason, want) {
				t.Errorf("refused, the worker says %q; want %q in it", st.Reason, want)
			}
		}
		if strings.Contains(st.Reason, "cannot reach") {
			t.Errorf("refused, the worker blames reachability: %q", st.Reason)
		}
	}
	if n := strings.Count(logs.String(), "heartbeat refused"); n != 1 {
		t.Errorf("three refused heartbeats logged %d times; want once:\n%s", n, logs)
	}
	exec(grant)
	e.heartbeat(ctx)
	e.heartbeat(ctx)
	if st := w.Status(); st.State != status.JobRunning || w.Unavailable() {
		t.Errorf("granted again, the worker is %+v; want it running on its lease", st)
	}
	if n := strings.Count(logs.String(), "heartbeats accepted again"); n != 1 {
		t.Errorf("the recovery logged %d times; want once:\n%s", n, logs)
	}
}

// A leader refused the publication of its decision logs it once, and its
// own workers, whose leases then lapse, give that as their reason rather
// than "no leader renewed it".
func TestRefusedPublicationIsTheLeadersWorkersReason(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := schema.Migrate(context.Background(), admin); err != nil {
		t.Fatal(err)
	}
	e, logs := newEngine(t, c.Primary.DSN(pgcluster.RoleAdmin))
	ctx := context.Background()
	w, err := e.Register(ctx, jobs.Config{Name: "publish-refused"})
	if err != nil {
		t.Fatal(err)
	}
	refused := &store.TableError{Table: store.LeaderTable, Err: &pgconn.PgError{Code: "42501", Message: "permission denied for table leader"}}
	e.isLeader.Store(true)
	for range 2 {
		e.publishFailed("cannot publish allocations", e.denied(refused))
	}
	if n := strings.Count(logs.String(), "leader may not publish"); n != 1 {
		t.Errorf("two refused publications logged %d times; want once:\n%s", n, logs)
	}
	e.heartbeat(ctx)
	st := w.Status()
	if !w.Unavailable() || !strings.HasPrefix(st.Reason, "allocation lease expired: this process leads but may not publish: ") ||
		!strings.Contains(st.Reason, "GRANT SELECT, INSERT, UPDATE ON "+store.LeaderTable) {
		t.Fatalf("the refused leader's own worker says %+v; want the refusal as its reason", st)
	}
	// A failure that is no refusal is logged each time, and is no reason.
	e.publishDenied.Store(nil)
	for range 2 {
		e.publishFailed("cannot publish allocations", errors.New("timeout"))
	}
	if n := strings.Count(logs.String(), "cannot publish allocations"); n < 3 {
		t.Errorf("other failures logged %d times in all; want each:\n%s", n, logs)
	}
	e.heartbeat(ctx)
	if st := w.Status(); st.Reason != "allocation lease expired: no leader renewed it" {
		t.Errorf("after a failure that is no refusal the worker says %q", st.Reason)
	}
}
