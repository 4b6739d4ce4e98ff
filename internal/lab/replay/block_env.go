package replay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// BlockEnv is what the blocks of one invocation share: the pair, its
// admin pool, the foreground's pool and how far the cleanups reached.
type BlockEnv struct {
	c     *pgcluster.Cluster
	admin *pgxpool.Pool
	fg    *pgxpool.Pool
	cores int
	scale int
	// upTo is the largest key the jobs reached since the table was last
	// restored.
	upTo atomic.Int64
}

// OpenBlockEnv creates the tables (a cleaned table of rows rows, half
// old, and the foreground's at scale), migrates the canary's table and
// waits for the replica. Close drops them.
func OpenBlockEnv(ctx context.Context, c *pgcluster.Cluster, cores, scale, workers int, rows int64, logf func(string, ...any)) (*BlockEnv, error) {
	adminCfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return nil, err
	}
	adminCfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(ctx, adminCfg)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := setupTables(ctx, admin, scale, rows); err != nil {
		admin.Close()
		return nil, err
	}
	if _, err := schema.Migrate(ctx, admin); err != nil {
		admin.Close()
		return nil, err
	}
	if err := settle(ctx, c, admin, 15*time.Minute); err != nil {
		admin.Close()
		return nil, err
	}
	logf("tables ready in %s: %s with %d rows (half old), pgbench scale %d", time.Since(t0).Round(100*time.Millisecond), EventsTable, rows, scale)
	fg, err := foregroundPool(ctx, c, workers)
	if err != nil {
		admin.Close()
		return nil, err
	}
	return &BlockEnv{c: c, admin: admin, fg: fg, cores: cores, scale: scale}, nil
}

// Close drops the tables and closes the pools.
func (e *BlockEnv) Close() {
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = dropTables(dctx, e.admin)
	e.fg.Close()
	e.admin.Close()
}

// OldRowsLeft is how many old rows the cleaned table still holds, from
// the largest key the jobs reached (every even key is old).
func (e *BlockEnv) OldRowsLeft(rows int64) int64 { return max(0, (rows-e.upTo.Load())/2) }

// Restore puts back the old rows the jobs deleted, vacuums and waits for
// the replica, so the next block starts from a full table.
func (e *BlockEnv) Restore(ctx context.Context) error {
	if err := restore(ctx, e.c, e.admin, e.upTo.Load()); err != nil {
		return err
	}
	e.upTo.Store(0)
	return nil
}
