package main

import (
	"context"
	"testing"
	"time"

	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/throttle/hold"
)

// `throttled pause` without --ttl sends no TTL of its own, so the
// cluster's default applies (holds.default_ttl of throttled run, kept in
// throttled.settings), not a default compiled into the CLI: a cluster
// whose holds last 15 minutes gets 15-minute holds from the CLI too.
func TestPauseWithoutTTLTakesTheClusterDefault(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	dsn := c.Primary.DSN(pgcluster.RoleAdmin)
	db, err := openDB(ctx, dsn, holds.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Pool().Close) // after the TTLs are put back: cleanups run last first
	if _, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{Default: 15 * time.Minute, Max: 2 * time.Hour}, "ops", hold.SourceManual, "short holds"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{}, "test", hold.SourceManual, "test done"); err != nil {
			t.Errorf("put the cluster's TTLs back: %v", err)
		}
	})
	life := func(job string, args ...string) time.Duration {
		t.Helper()
		cli(t, append([]string{"pause", "--primary-dsn", dsn, "--job", job, "--reason", "ttl check", "--actor", "alice"}, args...)...)
		active, err := db.Holds().Active(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range active {
			if h.Scope == hold.OneJob(job) {
				if _, err := db.Holds().Release(ctx, h.ID, "alice", hold.SourceCLI, "ttl checked"); err != nil {
					t.Fatal(err)
				}
				return h.Expires.Sub(h.Created).Round(time.Second)
			}
		}
		t.Fatalf("no hold on job:%s after throttled pause", job)
		return 0
	}
	if got := life("ttl-cli-default"); got != 15*time.Minute {
		t.Errorf("throttled pause without --ttl: a hold of %s; want the cluster's default 15m", got)
	}
	if got := life("ttl-cli-given", "--ttl", "40m"); got != 40*time.Minute {
		t.Errorf("throttled pause --ttl 40m: a hold of %s", got)
	}
}
