package signals

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// The WAL rate rises while a job writes and falls back when it stops.
func TestWALRateFollowsWrites(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS wal_churn (id int, pad text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE IF EXISTS wal_churn") })
	// Writes about 1 MB every tick until the rate shows it.
	pgtest.Eventually(t, 20*time.Second, func() error {
		if _, err := admin.Exec(ctx, "INSERT INTO wal_churn SELECT g, repeat('x', 500) FROM generate_series(1, 2000) g"); err != nil {
			return err
		}
		v, err := value(t, p, WALBytesPerSecond, "", false)
		if err != nil {
			return err
		}
		return want(WALBytesPerSecond, v, 1e5, ">=")
	})
	// Idle, it falls back: a streaming pair writes little WAL by itself.
	waitValue(t, p, 20*time.Second, WALBytesPerSecond, "", false, "<=", 5e4)
}

// archiver reads archive_failing and archive_pending_segments from one
// tick.
func archiver(t *testing.T, p *Poller) (failing, pending float64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Tick(ctx)
	snap := p.Snapshot()
	f, p2 := get(t, snap, ArchiveFailing, ""), get(t, snap, ArchivePendingSegments, "")
	if err := errors.Join(f.Err, p2.Err); err != nil {
		return 0, 0, err
	}
	return f.Value, p2.Value, nil
}

// With archive_mode on and an archive_command that fails, segments pile
// up and the archiver reads as failing; once the command works, both
// clear.
func TestArchiveFailuresAndBacklog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Config: []string{"archive_mode = on", "archive_command = 'false'"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	p := newPoller(t, c, nil)
	admin, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	switchWAL := func() {
		t.Helper()
		if _, err := admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS arch (x int); INSERT INTO arch VALUES (1); SELECT pg_switch_wal()"); err != nil {
			t.Fatal(err)
		}
	}
	switchWAL()
	switchWAL()
	pgtest.Eventually(t, 30*time.Second, func() error {
		failing, pending, err := archiver(t, p)
		if err != nil {
			return err
		}
		if failing != 1 || pending < 2 {
			return fmt.Errorf("archive_failing %v, archive_pending_segments %v; want 1 and at least 2", failing, pending)
		}
		return nil
	})
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET archive_command = 'true'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	// The archiver retries within a minute at most; a new segment wakes it.
	pgtest.Eventually(t, 70*time.Second, func() error {
		switchWAL()
		failing, pending, err := archiver(t, p)
		if err != nil {
			return err
		}
		if failing != 0 || pending != 0 {
			return fmt.Errorf("archive_failing %v, archive_pending_segments %v after the command was fixed; want 0 and 0", failing, pending)
		}
		return nil
	})

	// A slow archiver that succeeds: segments wait, nothing fails.
	reconfigure := func(cmd string) {
		t.Helper()
		if _, err := admin.Exec(ctx, "ALTER SYSTEM SET archive_command = '"+cmd+"'"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	reconfigure("sleep 3")
	pgtest.Eventually(t, 30*time.Second, func() error {
		switchWAL()
		failing, pending, err := archiver(t, p)
		if err != nil {
			return err
		}
		if failing != 0 || pending < 2 {
			return fmt.Errorf("a slow archiver: archive_failing %v, archive_pending_segments %v; want 0 and a backlog of 2 or more", failing, pending)
		}
		return nil
	})
	reconfigure("true")
	pgtest.Eventually(t, 70*time.Second, func() error {
		failing, pending, err := archiver(t, p)
		if err != nil {
			return err
		}
		if failing != 0 || pending != 0 {
			return fmt.Errorf("archive_failing %v, archive_pending_segments %v once the archiver is fast again; want 0 and 0", failing, pending)
		}
		return nil
	})
}
