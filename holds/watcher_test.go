package holds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/throttle/hold"
)

// A process whose clock runs ahead of the database's compared each hold's
// expires_at (the database's clock) with its own now, and so dropped a
// hold early: 2 h ahead, a 1 h hold never applied. The watcher reads each
// hold's remaining life by the database's clock and keeps a deadline on
// its own, so the hold applies for its life whatever the process's wall
// clock says, and still ends on time.
func TestWatcherExpiresHoldsOnTheDatabasesClock(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	db, err := New(pool, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE throttled.holds SET released_at = now(), released_by = 'test' WHERE released_at IS NULL"); err != nil {
		t.Fatal(err)
	}
	long, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceCLI, Reason: "replica rebuild", Actor: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	short, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("archive"), Source: hold.SourceCLI, Reason: "short", Actor: "alice", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ahead := func() time.Time { return time.Now().Add(2 * time.Hour) }
	w := NewWatcher(pool, WatcherConfig{MaxUnconfirmed: time.Minute})
	w.now = ahead
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.Applying(ahead(), "purge"); len(got) != 1 || got[0].ID != long.ID {
		t.Fatalf("a 1h hold on a process 2h ahead: applying %v; want %s", got, long.ID)
	}
	if got := w.Applying(ahead(), "purge"); !got[0].Expires.Equal(long.Expires) {
		t.Fatalf("the hold shows expiry %s; want the database's %s", got[0].Expires, long.Expires)
	}
	if got := w.Applying(ahead(), "archive"); len(got) != 1 || got[0].ID != short.ID {
		t.Fatalf("a 2s hold on a process 2h ahead: applying %v; want %s", got, short.ID)
	}
	// What the metrics and the status list is the same set.
	if got := w.Active(); len(got) != 2 {
		t.Fatalf("active holds on a process 2h ahead: %v; want both", got)
	}
	// Expiry still needs no read: the short hold ends on the local
	// deadline, with no refresh in between.
	pgtest.Eventually(t, 10*time.Second, func() error {
		if got := w.Applying(ahead(), "archive"); len(got) != 0 {
			return fmt.Errorf("still applying %v", got)
		}
		return nil
	})
	if got := w.Applying(ahead(), "purge"); len(got) != 1 {
		t.Fatalf("the 1h hold: applying %v", got)
	}
	if got := w.Active(); len(got) != 1 || got[0].ID != long.ID {
		t.Fatalf("active after the short hold ended: %v", got)
	}
}
