package holds_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/throttle/hold"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(t *testing.T) (*pgcluster.Cluster, *pgxpool.Pool, *holds.DB) {
	t.Helper()
	c := pgtest.Cluster(t)
	pool, err := pgxpool.New(context.Background(), c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := migrated(t, pool, holds.Config{})
	// Each test starts with no active hold.
	if _, err := pool.Exec(context.Background(), "UPDATE throttled.holds SET released_at = now(), released_by = 'test' WHERE released_at IS NULL"); err != nil {
		t.Fatal(err)
	}
	return c, pool, db
}

// migrated migrates the schema on pool and returns a DB on it under cfg.
func migrated(t *testing.T, pool *pgxpool.Pool, cfg holds.Config) *holds.DB {
	t.Helper()
	if err := holds.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	db, err := holds.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func events(t *testing.T, db *holds.DB, since time.Time) []string {
	t.Helper()
	es, err := db.Audit().Since(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Event+":"+e.HoldID)
	}
	return out
}

func TestAddValidatesAndAudits(t *testing.T) {
	_, pool, db := setup(t)
	ctx := context.Background()
	var dbNow time.Time
	pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow)
	for _, tc := range []struct {
		r    hold.Request
		want string
	}{
		{hold.Request{Scope: hold.AllJobs(), Source: hold.SourceManual, Reason: "x", TTL: 48 * time.Hour}, "TTL 48h0m0s exceeds the maximum 24h0m0s"},
		{hold.Request{Scope: hold.AllJobs(), Source: hold.SourceManual, Reason: "x", TTL: -time.Second}, "TTL -1s is negative"},
		{hold.Request{Scope: hold.AllJobs(), Source: hold.SourceManual, Reason: "  "}, "a reason is required"},
		{hold.Request{Scope: hold.AllJobs(), Source: "cron", Reason: "x"}, `source "cron"`},
		{hold.Request{Scope: hold.OneJob("Bad Name"), Source: hold.SourceManual, Reason: "x"}, "Bad Name"},
	} {
		if _, err := db.Holds().Add(ctx, tc.r); !errors.Is(err, hold.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%+v) = %v; want %q", tc.r, err, tc.want)
		}
	}
	h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceManual, Reason: "replica rebuild", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if d := h.Expires.Sub(h.Created); d != time.Hour {
		t.Fatalf("default TTL %s; want 1h", d)
	}
	if got := events(t, db, dbNow); len(got) != 1 || got[0] != "hold_created:"+h.ID {
		t.Fatalf("audit %v; want one hold_created for %s (refused requests leave nothing)", got, h.ID)
	}
}

func TestReleaseRules(t *testing.T) {
	_, _, db := setup(t)
	ctx := context.Background()
	person, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceManual, Reason: "investigating", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	auto, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceAuto, Reason: "critical load", Actor: "throttled"})
	if err != nil {
		t.Fatal(err)
	}
	// Automation never releases a person's hold.
	if _, err := db.Holds().Release(ctx, person.ID, "throttled", hold.SourceAuto, "load recovered"); !errors.Is(err, holds.ErrPersonsHold) {
		t.Fatalf("auto released a person's hold: %v", err)
	}
	// Nor does a Grafana alert, nor may it end throttled's own hold.
	for _, id := range []string{person.ID, auto.ID} {
		if _, err := db.Holds().Release(ctx, id, "grafana", hold.SourceGrafanaAlert, "alert resolved"); !errors.Is(err, holds.ErrPersonsHold) {
			t.Fatalf("grafana-alert released hold %s: %v", id, err)
		}
	}
	if released, err := db.Holds().ReleaseScope(ctx, hold.OneJob("purge"), "grafana", hold.SourceGrafanaAlert, "alert resolved"); err != nil || len(released) != 0 {
		t.Fatalf("grafana-alert scope release: %v, %v; want nothing released", released, err)
	}
	if released, err := db.Holds().ReleaseScope(ctx, hold.OneJob("purge"), "throttled", hold.SourceAuto, "load recovered"); err != nil || len(released) != 1 || released[0].ID != auto.ID {
		t.Fatalf("auto release of the scope: %v, %v; want only %s", released, err, auto.ID)
	}
	active, _ := db.Holds().Active(ctx)
	if len(active) != 1 || active[0].ID != person.ID {
		t.Fatalf("after the automatic hold ended: %v; want the person's hold alone", active)
	}
	if _, err := db.Holds().Release(ctx, auto.ID, "bob", hold.SourceCLI, ""); !errors.Is(err, hold.ErrUnknown) {
		t.Fatalf("releasing a released hold: %v", err)
	}
	if _, err := db.Holds().Release(ctx, "h999999", "bob", hold.SourceCLI, ""); !errors.Is(err, hold.ErrUnknown) || !strings.Contains(err.Error(), "h999999") {
		t.Fatalf("unknown hold: %v", err)
	}
	if _, err := db.Holds().Release(ctx, person.ID, "alice", hold.SourceCLI, "done"); err != nil {
		t.Fatal(err)
	}
}

func TestAuditIsAppendOnly(t *testing.T) {
	_, pool, db := setup(t)
	ctx := context.Background()
	if err := db.Audit().Append(ctx, holds.Entry{Event: holds.EventReload, Actor: "ops", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"UPDATE throttled.audit SET reason = 'rewritten'", "DELETE FROM throttled.audit", "TRUNCATE throttled.audit"} {
		_, err := pool.Exec(ctx, q)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s: %v; want refused as append-only", q, err)
		}
	}
}

func TestWatcherSeesChangesWithinASecondByNotification(t *testing.T) {
	_, pool, db := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A poll every 30 s: only the notification can deliver within a second.
	w := holds.NewWatcher(pool, holds.WatcherConfig{Poll: 30 * time.Second, MaxUnconfirmed: time.Minute})
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	// Give the listener its connection before the change.
	pgtest.Eventually(t, 10*time.Second, func() error {
		var n int
		pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN "+holds.Channel+"'").Scan(&n)
		if n == 0 {
			return errors.New("not listening yet")
		}
		return nil
	})
	h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.Group("purge_"), Source: hold.SourceCLI, Reason: "deploy", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, time.Second, func() error {
		if got := w.Applying(time.Now(), "purge_sessions"); len(got) != 1 || got[0].ID != h.ID {
			return fmt.Errorf("applying %v", got)
		}
		return nil
	})
	if got := w.Applying(time.Now(), "archive"); len(got) != 0 {
		t.Fatalf("a group hold on purge_ applies to archive: %v", got)
	}
	if _, err := db.Holds().Release(ctx, h.ID, "alice", hold.SourceCLI, "done"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, time.Second, func() error {
		if got := w.Applying(time.Now(), "purge_sessions"); len(got) != 0 {
			return fmt.Errorf("still applying %v", got)
		}
		return nil
	})
}

func TestHoldsExpireOnTheirOwnAndAreAuditedOnce(t *testing.T) {
	_, pool, db := setup(t)
	ctx := context.Background()
	var start time.Time
	pool.QueryRow(ctx, "SELECT now()").Scan(&start)
	h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.AllJobs(), Source: hold.SourceCLI, Reason: "short", Actor: "alice", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A process started after the hold sees it before its first batch.
	// (The TTL gives the add, the watcher's start and its three reads
	// room on a loaded machine: past it, the hold has rightly ended. The
	// watcher reads once, so it trusts that read past the TTL: else it
	// would fail closed first.)
	w := holds.NewWatcher(pool, holds.WatcherConfig{MaxUnconfirmed: time.Minute})
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.Applying(time.Now(), "anything"); len(got) != 1 || got[0].ID != h.ID {
		t.Fatalf("new watcher: %v", got)
	}
	// Expiry needs no one: the hold stops applying at its time.
	pgtest.Eventually(t, 10*time.Second, func() error {
		if got := w.Applying(time.Now(), "anything"); len(got) != 0 {
			return fmt.Errorf("still applying %v", got)
		}
		return nil
	})
	// Many processes refresh; the expiry is audited once.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			other := holds.NewWatcher(pool, holds.WatcherConfig{})
			other.Refresh(ctx)
		})
	}
	wg.Wait()
	n := 0
	for _, e := range events(t, db, start) {
		if e == "hold_expired:"+h.ID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("expiry audited %d times: %v", n, events(t, db, start))
	}
}

func TestWatcherFailsClosedWhenItCannotConfirm(t *testing.T) {
	c, pool, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := holds.NewWatcher(pool, holds.WatcherConfig{Poll: 200 * time.Millisecond, MaxUnconfirmed: time.Second, QueryTimeout: 500 * time.Millisecond})
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	if got := w.Applying(time.Now(), "purge"); len(got) != 0 {
		t.Fatalf("holds before the hang: %v", got)
	}
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	hungAt := time.Now()
	pgtest.Eventually(t, 10*time.Second, func() error {
		got := w.Applying(time.Now(), "purge")
		if len(got) != 1 || got[0].ID != holds.UnconfirmedHoldID {
			return fmt.Errorf("applying %v", got)
		}
		return nil
	})
	if d := time.Since(hungAt); d > 3*time.Second {
		t.Errorf("failed closed after %s; want within about MaxUnconfirmed (1s) plus a read timeout", d)
	}
	c.ResumePrimary()
	pgtest.Eventually(t, 15*time.Second, func() error {
		if got := w.Applying(time.Now(), "purge"); len(got) != 0 {
			return fmt.Errorf("applying %v", got)
		}
		return nil
	})
}

func TestEnforceDetectsAuditsAndCancelsWorkUnderAHold(t *testing.T) {
	c, pool, db := setup(t)
	ctx := context.Background()
	w := holds.NewWatcher(pool, holds.WatcherConfig{})
	h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("rogue"), Source: hold.SourceManual, Reason: "incident", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// A session tagged as the job that ignores the hold.
	rogue := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := rogue.Exec(ctx, "SET application_name = 'throttled:rogue'"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rogue.Exec(ctx, "BEGIN; SELECT pg_sleep(60); COMMIT")
		done <- err
	}()
	// Not while the hold is younger than the grace, nor the transaction.
	if vs, err := holds.NewEnforcer(pool, w, holds.EnforcerConfig{Grace: 30 * time.Second}).Enforce(ctx); err != nil || len(vs) != 0 {
		t.Fatalf("within the grace: %v, %v", vs, err)
	}
	var vs []holds.Violation
	enforcer := holds.NewEnforcer(pool, w, holds.EnforcerConfig{Grace: time.Second, Cancel: true})
	pgtest.Eventually(t, 10*time.Second, func() error {
		var err error
		vs, err = enforcer.Enforce(ctx)
		if err == nil && len(vs) == 0 {
			err = errors.New("no violation yet")
		}
		return err
	})
	if v := vs[0]; v.Job != "rogue" || !v.Cancelled || len(v.Holds) != 1 || v.Holds[0].ID != h.ID {
		t.Fatalf("violation %+v", v)
	}
	select {
	case err := <-done:
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("the rogue session's query: %v; want cancelled (57014)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the rogue session was not cancelled")
	}
	es, _ := db.Audit().Since(ctx, h.Created.Add(-time.Second))
	n := 0
	for _, e := range es {
		if e.Event == holds.EventPauseNotHonoured && e.Detail["job"] == "rogue" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d pause_not_honoured audit lines; want 1", n)
	}
}

// setClusterCap sets the cluster's cap on holds for the test and puts the
// default back after it.
func setClusterCap(t *testing.T, store *holds.Store, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.SetTTL(ctx, hold.TTLPolicy{Max: ttl}, "test", hold.SourceManual, "test"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := store.SetTTL(ctx, hold.TTLPolicy{}, "test", hold.SourceManual, "test done"); err != nil {
			t.Errorf("put the cluster's cap back: %v", err)
		}
	})
}

// Failure 8: the 24 h cap came from the caller's own flag (`pause --ttl 72h
// --max-ttl 100h` made a 72-hour hold). The cap is the cluster's, kept in
// throttled.settings and enforced by the database on every insert and
// every renewal: a store configured with a larger maximum, an external
// alert's renewal, and plain SQL are all refused, and nothing is written.
func TestClusterCapIsEnforcedByTheDatabase(t *testing.T) {
	_, pool, _ := setup(t)
	ctx := context.Background()
	var start time.Time
	pool.QueryRow(ctx, "SELECT now()").Scan(&start)
	db, err := holds.New(pool, holds.Config{TTL: hold.TTLPolicy{Max: 100 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := db.Holds().ClusterTTL(ctx); err != nil || got.Max != holds.DefaultMaxTTL || got.Default != holds.DefaultTTL {
		t.Fatalf("cluster TTLs %+v, %v; want the defaults %s, %s", got, err, holds.DefaultTTL, holds.DefaultMaxTTL)
	}
	if _, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{Max: time.Millisecond}, "alice", hold.SourceCLI, "x"); !errors.Is(err, hold.ErrInvalid) {
		t.Fatalf("a cap of 1ms: %v; want refused", err)
	}
	setClusterCap(t, db.Holds(), 2*time.Hour)
	// The default cap back again writes nothing; a change is audited once,
	// with who and the old and new values.
	if old, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{Max: 2 * time.Hour}, "test", hold.SourceManual, "again"); err != nil || old.Max != 2*time.Hour {
		t.Fatalf("same cap again: %+v, %v", old, err)
	}
	es, err := db.Audit().Since(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	var changes []holds.Entry
	for _, e := range es {
		if e.Event == holds.EventMaxTTL {
			changes = append(changes, e)
		}
	}
	if len(changes) != 1 || changes[0].Actor != "test" || changes[0].Detail["old_seconds"] != 86400.0 || changes[0].Detail["new_seconds"] != 7200.0 {
		t.Fatalf("cap changes audited: %+v; want one, by test, 86400 s to 7200 s", changes)
	}

	req := hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceManual, Reason: "long", Actor: "alice", TTL: 3 * time.Hour}
	if _, err := db.Holds().Add(ctx, req); !errors.Is(err, hold.ErrInvalid) || !strings.Contains(err.Error(), "TTL 3h0m0s exceeds the maximum 2h0m0s") {
		t.Fatalf("Add 3h under a 2h cluster cap (store max 100h): %v", err)
	}
	if _, _, err := db.Holds().AddExternal(ctx, "grafana:cap-new", time.Time{}, req); !errors.Is(err, hold.ErrInvalid) || !strings.Contains(err.Error(), "exceeds the maximum 2h0m0s") {
		t.Fatalf("AddExternal 3h: %v", err)
	}
	// A renewal may not stretch a hold past the cap either.
	req.TTL = time.Hour
	ext, res, err := db.Holds().AddExternal(ctx, "grafana:cap-renew", time.Time{}, req)
	if err != nil || res != holds.ExternalAdded {
		t.Fatalf("AddExternal 1h: %v, %v", res, err)
	}
	req.TTL = 3 * time.Hour
	if _, _, err := db.Holds().AddExternal(ctx, "grafana:cap-renew", time.Time{}, req); !errors.Is(err, hold.ErrInvalid) || !strings.Contains(err.Error(), "TTL 3h0m0s") {
		t.Fatalf("renewal to 3h: %v", err)
	}
	// Plain SQL, as the role that writes schema throttled.
	var pgErr *pgconn.PgError
	_, err = pool.Exec(ctx, `INSERT INTO throttled.holds (scope_kind, scope_value, source, reason, actor, expires_at)
		VALUES ('all', '', 'manual', 'by hand', 'mallory', now() + interval '72 hours')`)
	if !errors.As(err, &pgErr) || pgErr.Code != "TH001" {
		t.Fatalf("INSERT of a 72h hold by SQL: %v; want refused with TH001", err)
	}
	n := strings.TrimPrefix(ext.ID, "h")
	if _, err := pool.Exec(ctx, "UPDATE throttled.holds SET expires_at = now() + interval '72 hours' WHERE id = "+n); !errors.As(err, &pgErr) || pgErr.Code != "TH001" {
		t.Fatalf("UPDATE of expires_at to 72h by SQL: %v; want refused with TH001", err)
	}
	// Shortening is always allowed.
	if _, err := pool.Exec(ctx, "UPDATE throttled.holds SET expires_at = expires_at - interval '1 minute' WHERE id = "+n); err != nil {
		t.Fatalf("shortening a hold: %v", err)
	}
	var created int
	var longest time.Duration
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(max(expires_at - now()), '0') FROM throttled.holds WHERE created_at >= $1`, start).Scan(&created, &longest); err != nil {
		t.Fatal(err)
	}
	if created != 1 || longest > time.Hour {
		t.Fatalf("%d holds written, the longest %s left; want only the 1h external hold", created, longest)
	}
}

// Failure 5: a NUL in a release reason reached PostgreSQL, which refused
// it with a raw SQLSTATE (answered 500), while the same input in a pause
// was refused as invalid (400). Every write checks its text first.
func TestReleaseRefusesTextPostgresCannotStore(t *testing.T) {
	_, _, db := setup(t)
	ctx := context.Background()
	h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceManual, Reason: "investigating", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("grafana:nul-%d", time.Now().UnixNano())
	if _, _, err := db.Holds().AddExternal(ctx, key, time.Time{}, hold.Request{Scope: hold.AllJobs(), Source: hold.SourceGrafanaAlert, Reason: "alert", Actor: "grafana"}); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Release reason": func() error { _, err := db.Holds().Release(ctx, h.ID, "bob", hold.SourceCLI, "\x00"); return err },
		"Release actor":  func() error { _, err := db.Holds().Release(ctx, h.ID, "b\xffob", hold.SourceCLI, "done"); return err },
		"ReleaseScope": func() error {
			_, err := db.Holds().ReleaseScope(ctx, h.Scope, "bob", hold.SourceCLI, "a\x00b")
			return err
		},
		"ReleaseExternal": func() error {
			_, err := db.Holds().ReleaseExternal(ctx, key, time.Time{}, "grafana", hold.SourceGrafanaAlert, "\x00")
			return err
		},
		"AddExternal key": func() error {
			_, _, err := db.Holds().AddExternal(ctx, "grafana:\x00", time.Time{}, hold.Request{Scope: hold.AllJobs(), Source: hold.SourceGrafanaAlert, Reason: "a"})
			return err
		},
		"SetTTL reason": func() error {
			_, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{Max: time.Hour}, "ops", hold.SourceManual, "\x00")
			return err
		},
	} {
		if err := call(); !errors.Is(err, hold.ErrInvalid) {
			t.Errorf("%s with text PostgreSQL cannot store: %v; want an error wrapping hold.ErrInvalid", name, err)
		}
	}
	active, err := db.Holds().Active(ctx)
	if err != nil || len(active) != 2 {
		t.Fatalf("after the refusals: %v, %v; want both holds still active", active, err)
	}
	if got, err := db.Holds().ClusterTTL(ctx); err != nil || got.Max != holds.DefaultMaxTTL {
		t.Fatalf("cluster TTLs %+v, %v; want the cap unchanged", got, err)
	}
}

// An audit line is written whatever its text: a refused reload's error
// with a NUL in it once failed to be audited at all.
func TestAuditStoresAnyText(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := migrated(t, pool, holds.Config{})
	start := time.Now().Add(-time.Second)
	if err := db.Audit().Append(ctx, holds.Entry{Event: holds.EventReload, Actor: "op\x00", Source: "sighup", Reason: "refused: bad \x00 byte \xff",
		Detail: map[string]any{"error": "x\x00y"}}); err != nil {
		t.Fatalf("audit with a NUL: %v", err)
	}
	es, err := db.Audit().Since(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range es {
		if e.Event == holds.EventReload && e.Actor == "op\uFFFD" && e.Reason == "refused: bad \uFFFD byte \uFFFD" && e.Detail["error"] == "x\uFFFDy" {
			found = true
		}
	}
	if !found {
		t.Fatalf("audit entries: %+v", es)
	}
}

// A DB on a current schema, as the sampler's pg_monitor role, lists the
// holds and reads the audit without migrating (which that role may not);
// on a database whose schema throttled is missing CheckSchema says so,
// and which migrations it lacks.
func TestAReadOnlyDBNeedsNoWrite(t *testing.T) {
	c, _, admin := setup(t)
	ctx := context.Background()
	h, err := admin.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("read-only"), Source: hold.SourceCLI, Reason: "read me", Actor: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Holds().Release(context.Background(), h.ID, "alice", hold.SourceCLI, "test over") })
	mon, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleMonitor))
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := holds.Migrate(ctx, mon); err == nil {
		t.Fatal("Migrate as pg_monitor succeeded; want refused (it may not write the schema)")
	}
	if err := holds.CheckSchema(ctx, mon); err != nil {
		t.Fatalf("CheckSchema as pg_monitor: %v", err)
	}
	ro, err := holds.New(mon, holds.Config{})
	if err != nil {
		t.Fatal(err)
	}
	active, err := ro.Holds().Active(ctx)
	if err != nil || !slices.ContainsFunc(active, func(x hold.Hold) bool { return x.ID == h.ID }) {
		t.Fatalf("Active as pg_monitor: %v, %v; want hold %s", active, err, h.ID)
	}
	if es, err := ro.Audit().Since(ctx, time.Now().Add(-time.Hour)); err != nil || len(es) == 0 {
		t.Fatalf("Audit().Since as pg_monitor: %d entries, %v", len(es), err)
	}

	// A database never migrated.
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP DATABASE IF EXISTS throttled_fresh"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE DATABASE throttled_fresh"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP DATABASE IF EXISTS throttled_fresh WITH (FORCE)") })
	u, err := url.Parse(c.Primary.DSN(pgcluster.RoleMonitor))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/throttled_fresh"
	fresh, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	err = holds.CheckSchema(ctx, fresh)
	if !errors.Is(err, holds.ErrSchemaBehind) || !strings.Contains(err.Error(), "0001_checkpoints") || !strings.Contains(err.Error(), "throttled migrate") {
		t.Fatalf("CheckSchema on a database never migrated: %v; want ErrSchemaBehind naming the migrations and throttled migrate", err)
	}
}

// A hold whose request and store give no TTL lives the cluster's default
// (throttled.settings.default_hold_ttl, written with the cap by SetTTL),
// not a default compiled into the client; a store's own Max still
// narrows it, a store's own Default still wins, and a change of the
// default is audited.
func TestHoldWithoutTTLLivesTheClusterDefault(t *testing.T) {
	_, pool, _ := setup(t)
	ctx := context.Background()
	var start time.Time
	pool.QueryRow(ctx, "SELECT now()").Scan(&start)
	db, err := holds.New(pool, holds.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{Default: 15 * time.Minute, Max: 2 * time.Hour}, "ops", hold.SourceManual, "short holds"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{}, "test", hold.SourceManual, "test done"); err != nil {
			t.Errorf("put the cluster's TTLs back: %v", err)
		}
	})
	life := func(s *holds.Store, ttl time.Duration) time.Duration {
		t.Helper()
		h, err := s.Add(ctx, hold.Request{Scope: hold.OneJob("ttl-default"), Source: hold.SourceCLI, Reason: "x", Actor: "alice", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return h.Expires.Sub(h.Created).Round(time.Second)
	}
	if got := life(db.Holds(), 0); got != 15*time.Minute {
		t.Errorf("a hold without a TTL lives %s; want the cluster's default 15m", got)
	}
	if got := life(db.Holds(), 90*time.Minute); got != 90*time.Minute {
		t.Errorf("a hold asking 90m lives %s", got)
	}
	narrow, err := holds.New(pool, holds.Config{TTL: hold.TTLPolicy{Max: 5 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if got := life(narrow.Holds(), 0); got != 5*time.Minute {
		t.Errorf("under a store's own max 5m a hold without a TTL lives %s; want 5m", got)
	}
	own, err := holds.New(pool, holds.Config{TTL: hold.TTLPolicy{Default: 3 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if got := life(own.Holds(), 0); got != 3*time.Minute {
		t.Errorf("a store with its own default 3m gave %s", got)
	}
	if _, err := holds.New(pool, holds.Config{TTL: hold.TTLPolicy{Default: 2 * time.Hour, Max: time.Hour}}); err == nil ||
		!strings.Contains(err.Error(), "default TTL 2h0m0s exceeds max TTL 1h0m0s") {
		t.Errorf("a store whose default exceeds its max: %v; want refused by the one policy", err)
	}
	es, err := db.Audit().Since(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Event == holds.EventDefaultTTL && e.Actor == "ops" && e.Reason == "short holds" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d audit lines of the default's change by ops; want 1", n)
	}
}
