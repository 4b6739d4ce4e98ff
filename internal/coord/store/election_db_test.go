package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setup returns the pair and a superuser connection to its primary, with
// throttled's tables migrated and no leader's publication.
func setup(t *testing.T) (*pgcluster.Cluster, *pgx.Conn) {
	t.Helper()
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.ForgetLeader(ctx, admin); err != nil {
		t.Fatal(err)
	}
	return c, admin
}

// The leader's lock is one session's at a time: a second session cannot
// take it while the first holds it, and the holder may take it again.
func TestTryLeaderLockIsOneSessions(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	first := store.New(pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin))
	second := store.New(pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin))
	try := func(s *store.Store) bool {
		t.Helper()
		got, err := s.TryLeaderLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if !try(first) {
		t.Fatal("the first session could not take a free lock")
	}
	if try(second) {
		t.Fatal("a second session took the lock the first holds")
	}
	if !try(first) {
		t.Fatal("the holder could not take its own lock again")
	}
}

// The holder's closed session releases the lock to the next candidate.
func TestLeaderLockPassesWhenTheSessionEnds(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	holderConn, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holderConn.Close(context.Background()) })
	next := store.New(pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin))
	if got, err := store.New(holderConn).TryLeaderLock(ctx); err != nil || !got {
		t.Fatalf("TryLeaderLock = %v, %v; want the free lock taken", got, err)
	}
	if got, err := next.TryLeaderLock(ctx); err != nil || got {
		t.Fatalf("TryLeaderLock = %v, %v while another session holds it; want false", got, err)
	}
	if err := holderConn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The server frees the lock when the backend exits, a moment after
	// the client closed.
	pgtest.Eventually(t, 10*time.Second, func() error {
		got, err := next.TryLeaderLock(ctx)
		if err == nil && !got {
			err = errors.New("the lock is still held after its session closed")
		}
		return err
	})
}

// Ping answers on a live session and fails once the server ended it: how
// a leader learns that its lock went with its session.
func TestPingFailsWhenTheSessionEnds(t *testing.T) {
	c, admin := setup(t)
	ctx := context.Background()
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	s := store.New(conn)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping on a live session: %v", err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		if s.Ping(ctx) == nil {
			return errors.New("Ping succeeds on a terminated session")
		}
		return nil
	})
}

// LeaderQuiet: no publication ever is quiet; a publication is quiet only
// once it is older than the window asked about.
func TestLeaderQuiet(t *testing.T) {
	_, admin := setup(t)
	ctx := context.Background()
	s := store.New(admin)
	quiet := func(within time.Duration) bool {
		t.Helper()
		q, err := s.LeaderQuiet(ctx, within)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	if !quiet(time.Hour) {
		t.Fatal("no leader ever published, yet LeaderQuiet says one did within the hour")
	}
	if err := s.Publish(ctx, store.Publication{Leader: "test", Budget: 1, Mode: "running", Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "UPDATE throttled.leader SET published_at = now() - interval '10 seconds' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		within time.Duration
		want   bool
	}{
		{time.Minute, false},
		{11 * time.Second, false},
		{9 * time.Second, true},
		{time.Second, true},
	} {
		if got := quiet(tc.within); got != tc.want {
			t.Errorf("published 10 s ago: LeaderQuiet(%s) = %v; want %v", tc.within, got, tc.want)
		}
	}
}

// A refused read of the leader's table names the table, so the caller can
// name the GRANT.
func TestLeaderQuietNamesItsTable(t *testing.T) {
	c, _ := setup(t)
	plain := store.New(pgtest.Connect(t, c.Primary, pgcluster.RolePlain))
	_, err := plain.LeaderQuiet(context.Background(), time.Second)
	var te *store.TableError
	if !errors.As(err, &te) || te.Table != store.LeaderTable {
		t.Fatalf("LeaderQuiet as a role without access: %v; want a TableError on %s", err, store.LeaderTable)
	}
}
