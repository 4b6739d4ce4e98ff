package replay

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// Tables the benchmark creates on the primary. The pgbench-like tables
// carry the foreground load; EventsTable is the one the job cleans.
const (
	EventsTable = "replay_events"
	accounts    = "replay_accounts"
	tellers     = "replay_tellers"
	branches    = "replay_branches"
	history     = "replay_history"

	accountsPerBranch = 100_000
	tellersPerBranch  = 10
)

// Retention is the job's retention: rows older than this are old. Every
// even id of EventsTable is 60 days old, every odd one a day old, so each
// window of keys the job walks holds as many old rows as recent ones.
const Retention = 30 * 24 * time.Hour

// setupTables drops and creates the benchmark's tables: the foreground's
// at scale branches, and EventsTable with rows rows, half of them old,
// loaded with INSERT ... SELECT generate_series and its key indexed after
// the load. Autovacuum is off on EventsTable: restore vacuums it between
// runs instead, so no run meets a vacuum another run caused.
//
// It also has autovacuum wake every AutovacuumNaptime, not every minute:
// the foreground updates its few branch rows thousands of times a second,
// and between two of the default minute's wake-ups its own p99 rose from
// 2 ms to over 100 ms with no job at all, falling back when autovacuum
// vacuumed the branches, tellers and history (the server's log). That
// sawtooth, a minute long, is no policy's doing; in the short replay's
// 2 s windows it set a/a's pairs from 0.03 to 3.5.
func setupTables(ctx context.Context, pool *pgxpool.Pool, scale int, rows int64) error {
	stmts := append([]string{
		fmt.Sprintf("ALTER SYSTEM SET autovacuum_naptime = '%s'", AutovacuumNaptime),
		"SELECT pg_reload_conf()",
	}, foregroundTables(scale)...)
	stmts = append(stmts,
		fmt.Sprintf("DROP TABLE IF EXISTS %s", EventsTable),
		fmt.Sprintf(`CREATE TABLE %s (id bigint NOT NULL, created_at timestamptz NOT NULL, payload text NOT NULL)
			WITH (autovacuum_enabled = off)`, EventsTable),
		fmt.Sprintf(`INSERT INTO %s SELECT g, CASE WHEN g %% 2 = 0 THEN now() - interval '60 days' ELSE now() - interval '1 day' END, md5(g::text)
			FROM generate_series(1, %d) g`, EventsTable, rows),
		fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (id)", EventsTable),
		fmt.Sprintf("VACUUM (ANALYZE) %s, %s, %s, %s", EventsTable, accounts, tellers, branches),
		"CHECKPOINT",
	)
	return execAll(ctx, pool, stmts)
}

// AutovacuumNaptime is the pair's autovacuum_naptime while the
// benchmark's tables exist (setupTables; dropTables puts the server's
// own back).
const AutovacuumNaptime = "5s"

// foregroundTables are the statements that drop and create the
// foreground's pgbench-like tables at scale branches.
func foregroundTables(scale int) []string {
	return []string{
		fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s", accounts, tellers, branches, history),
		fmt.Sprintf("CREATE TABLE %s (bid int PRIMARY KEY, bbalance int NOT NULL, filler char(88))", branches),
		fmt.Sprintf("CREATE TABLE %s (tid int PRIMARY KEY, bid int NOT NULL, tbalance int NOT NULL, filler char(84))", tellers),
		fmt.Sprintf("CREATE TABLE %s (aid int NOT NULL, bid int NOT NULL, abalance int NOT NULL, filler char(84))", accounts),
		fmt.Sprintf("CREATE TABLE %s (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))", history),
		fmt.Sprintf("INSERT INTO %s SELECT g, 0 FROM generate_series(1, %d) g", branches, scale),
		fmt.Sprintf("INSERT INTO %s SELECT g, (g - 1) / %d + 1, 0 FROM generate_series(1, %d) g", tellers, tellersPerBranch, scale*tellersPerBranch),
		fmt.Sprintf("INSERT INTO %s SELECT g, (g - 1) / %d + 1, 0, '' FROM generate_series(1, %d) g", accounts, accountsPerBranch, scale*accountsPerBranch),
		fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (aid)", accounts),
	}
}

func execAll(ctx context.Context, pool *pgxpool.Pool, stmts []string) error {
	for _, q := range stmts {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		_, err := pool.Exec(qctx, q)
		cancel()
		if err != nil {
			return fmt.Errorf("replay: set up tables: %.60s: %w", q, err)
		}
	}
	return nil
}

// dropTables removes the benchmark's tables.
func dropTables(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s, %s", EventsTable, accounts, tellers, branches, history)); err != nil {
		return err
	}
	return execAll(ctx, pool, []string{"ALTER SYSTEM RESET autovacuum_naptime", "SELECT pg_reload_conf()"})
}

// restore puts EventsTable back as setupTables left it, after a run that
// deleted old rows with keys up to upTo: the job walks keys in order, so
// its deletions are in [1, upTo]. Vacuuming before re-inserting lets the
// rows go back into the pages they left rather than at the table's end;
// vacuuming after sets the visibility map as it was. It empties the
// foreground's history, checkpoints, waits until the replica has
// replayed it all, and has the kernel write its dirty pages out: left to
// themselves they would be written back about 30 s later (the kernel's
// dirty_expire_centisecs), in the middle of the next run.
func restore(ctx context.Context, c *pgcluster.Cluster, pool *pgxpool.Pool, upTo int64) error {
	stmts := []string{
		"VACUUM " + EventsTable,
		fmt.Sprintf(`INSERT INTO %s SELECT g, now() - interval '60 days', md5(g::text) FROM generate_series(2, %d, 2) g
			ON CONFLICT (id) DO NOTHING`, EventsTable, upTo),
		"TRUNCATE " + history,
		fmt.Sprintf("VACUUM (ANALYZE) %s, %s, %s, %s", EventsTable, accounts, tellers, branches),
		// The restore's WAL would otherwise make the checkpoint it is due
		// land inside the next run, whichever policy that is.
		"CHECKPOINT",
	}
	for _, q := range stmts {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		_, err := pool.Exec(qctx, q)
		cancel()
		if err != nil {
			return fmt.Errorf("replay: restore: %.40s: %w", q, err)
		}
	}
	return settle(ctx, c, pool, 2*time.Minute)
}

// settle waits, for up to wait, until the replica has replayed the
// primary's WAL as of now, and then has the kernel write its dirty pages
// out: the work a load or a restore leaves behind, which would otherwise
// land in whatever is measured next.
func settle(ctx context.Context, c *pgcluster.Cluster, pool *pgxpool.Pool, wait time.Duration) error {
	if err := waitReplayed(ctx, c, pool, wait); err != nil {
		return err
	}
	syscall.Sync()
	return nil
}

// waitReplayed polls, for up to wait, until the replica has replayed the
// primary's WAL as of now.
func waitReplayed(ctx context.Context, c *pgcluster.Cluster, pool *pgxpool.Pool, wait time.Duration) error {
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("replay: wal position: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := pgcluster.Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		var ok bool
		err := pool.QueryRow(ctx, `SELECT coalesce(bool_and(replay_lsn >= $1::pg_lsn), false) FROM pg_stat_replication WHERE application_name = $2`,
			lsn, pgcluster.ReplicaName).Scan(&ok)
		return ok, err
	})
	if err != nil {
		return fmt.Errorf("replay: replica did not replay up to %s within %s: %w", lsn, wait, err)
	}
	return nil
}

// serverVersion is the primary's PostgreSQL version, for the report.
func serverVersion(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var v string
	err := pool.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}
