package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// samplerDB is the database the sampler benchmark's sampler connects to,
// alone: its statistics are the sampler's cost and nothing else's (the
// sampler's statements read cluster-wide views, so the database it sits
// in does not change what it reads).
const samplerDB = "throttled_sampler_bench"

// samplerWindow is how long the sampler's cost is measured for, per
// worker count. pg_stat_database is flushed by each backend at most once
// a second, so a longer window is a steadier reading.
const samplerWindow = 8 * time.Second

// samplerClients bounds the coordinated clients (processes) the workers
// are spread over: each holds a few connections, and the pair's
// max_connections is small. A worker is one (client, job) pair, a row of
// throttled.workers, heartbeating on its own.
const samplerClients = 5

// samplerCost is the sampler's consumption of the primary over a window.
type samplerCost struct {
	count    float64 // statements (pg_stat_statements) or transactions (pg_stat_database)
	serverMs float64 // server time executing them, in ms
	sessions int     // sampler sessions at the end
	canaries int     // foreground-latency canary sessions at the end
	ticks    int64   // the leader's sampling rounds of the primary
}

// samplerMeter reads the sampler's cost: from pg_stat_statements when
// the primary preloads it (statements and their execution time, of the
// sampling role in samplerDB), else from pg_stat_database for samplerDB
// (transactions committed or rolled back, and active_time). The latter's
// transactions are as the server counts them, not derived from the
// sampler's ticks.
type samplerMeter struct {
	admin *pgx.Conn // on samplerDB
	pgss  bool
}

func newSamplerMeter(b *testing.B, c *pgcluster.Cluster) (*samplerMeter, string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := pgtest.Connect(b, c.Primary, pgcluster.RoleAdmin)
	var exists bool
	if err := root.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, samplerDB).Scan(&exists); err != nil {
		b.Fatal(err)
	}
	if !exists {
		if _, err := root.Exec(ctx, "CREATE DATABASE "+samplerDB); err != nil {
			b.Fatal(err)
		}
	}
	var preload string
	if err := root.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&preload); err != nil {
		b.Fatal(err)
	}
	dsn := func(role string) string {
		u, err := url.Parse(c.Primary.DSN(role))
		if err != nil {
			b.Fatal(err)
		}
		u.Path = "/" + samplerDB
		return u.String()
	}
	admin, err := pgx.Connect(ctx, dsn(pgcluster.RoleAdmin))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { admin.Close(context.Background()) })
	// throttled's schema makes the canary table, so the leader's
	// foreground-latency canary runs as it does by default: its
	// commits are part of what sampling costs.
	if _, err := schema.Migrate(ctx, admin); err != nil {
		b.Fatal(err)
	}
	m := &samplerMeter{admin: admin, pgss: strings.Contains(preload, "pg_stat_statements")}
	if m.pgss {
		if _, err := admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			b.Fatal(err)
		}
	}
	return m, dsn(pgcluster.RoleMonitor)
}

func (m *samplerMeter) read(ctx context.Context) (samplerCost, error) {
	var s samplerCost
	q := `SELECT (xact_commit + xact_rollback)::float8, active_time FROM pg_stat_database WHERE datname = $1 AND $2::text <> ''`
	if m.pgss {
		q = `SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(total_exec_time), 0) FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND userid = $2::text::regrole`
	}
	// Each read is its own transaction, so it sees the statistics as of now.
	if err := m.admin.QueryRow(ctx, q, samplerDB, pgcluster.RoleMonitor).Scan(&s.count, &s.serverMs); err != nil {
		return s, err
	}
	err := m.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE application_name = $2), count(*) FILTER (WHERE application_name = $3)
		FROM pg_stat_activity WHERE datname = $1`, samplerDB, signals.SamplerAppName, signals.CanaryAppName).Scan(&s.sessions, &s.canaries)
	return s, err
}

// BenchmarkSamplerCost measures what sampling costs the primary with 1,
// 20 and 200 coordinated workers: statements a second (stmts/s, from
// pg_stat_statements) or, without it, transactions a second (xacts/s,
// from pg_stat_database), server time a second (ms/s), the sampler's
// and the foreground-latency canary's sessions, and the leader's own
// count of sampling rounds. The canary's commits count in the first two. Only the leader samples, so
// all three should not grow with the workers. One iteration is one
// window; run it with -benchtime 1x.
func BenchmarkSamplerCost(b *testing.B) {
	c := pgtest.Cluster(b)
	meter, samplerDSN := newSamplerMeter(b, c)
	for _, workers := range []int{1, 20, 200} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			leader := openWorkers(b, c, samplerDSN, workers)
			if on, off := leader.ForegroundLatency(); !on {
				b.Fatalf("the foreground-latency canary is off (%s): its cost would be missing", off)
			}
			ctx := context.Background()
			var total samplerCost
			var elapsed time.Duration
			for b.Loop() {
				before, err := meter.read(ctx)
				if err != nil {
					b.Fatal(err)
				}
				start, t0 := time.Now(), ticks(leader)
				<-time.After(samplerWindow)
				after, err := meter.read(ctx)
				if err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				total.ticks += ticks(leader) - t0
				total.count += after.count - before.count
				total.serverMs += after.serverMs - before.serverMs
				total.sessions, total.canaries = after.sessions, after.canaries
			}
			b.ReportMetric(0, "ns/op")
			unit := "xacts/s"
			if meter.pgss {
				unit = "stmts/s"
			}
			b.ReportMetric(total.count/elapsed.Seconds(), unit)
			b.ReportMetric(total.serverMs/elapsed.Seconds(), "server-ms/s")
			b.ReportMetric(float64(total.sessions), "sampler-sessions")
			b.ReportMetric(float64(total.canaries), "canary-sessions")
			b.ReportMetric(float64(total.ticks)/elapsed.Seconds(), "leader-ticks/s")
		})
	}
}

// openWorkers opens up to samplerClients coordinated clients sampling
// through samplerDSN, the first leading, with workers jobs between them,
// and returns once the leader has a fresh sample and every job runs.
func openWorkers(b *testing.B, c *pgcluster.Cluster, samplerDSN string, workers int) (leader *throttled.Client) {
	b.Helper()
	opts := throttled.Options{PrimaryDSN: samplerDSN, Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true,
		Controller: throttle.Config{MaxBudget: 1000, InitialBudget: 1000}}
	clients := min(workers, samplerClients)
	var pacers []throttled.JobPacer
	for i := range clients {
		tc, err := throttled.Open(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tc.Close() })
		if i == 0 {
			leader = tc
			pgtest.Eventually(b, 20*time.Second, func() error {
				if !tc.Leader() {
					return errors.New("the first client does not lead yet")
				}
				return nil
			})
		}
		for j := i; j < workers; j += clients {
			p, err := tc.Pacer(jobs.Config{Name: fmt.Sprintf("sampler-bench-%d", j)})
			if err != nil {
				b.Fatal(err)
			}
			pacers = append(pacers, p)
		}
	}
	pgtest.Eventually(b, 30*time.Second, func() error {
		for _, p := range pacers {
			if err := clienttest.Running(p); err != nil {
				return err
			}
		}
		return nil
	})
	return leader
}

// ticks counts the primary's sampling rounds of every sampler in tc.
func ticks(tc *throttled.Client) int64 {
	var n int64
	for _, st := range tc.SamplerStats() {
		if st.Server == "primary" {
			n += st.Ticks
		}
	}
	return n
}
