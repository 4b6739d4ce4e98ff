package coord

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// recordingPoller is the real sampler; it keeps the primary_load sample
// of the last snapshot the leader took, the one its next decision is made
// on, and the time of the newest good one.
type recordingPoller struct {
	*signals.Poller
	mu   sync.Mutex
	last signals.Sample
}

func (p *recordingPoller) Snapshot() signals.Snapshot {
	snap := p.Poller.Snapshot()
	if s, ok := snap.Get(signals.PrimaryLoad, nil); ok {
		p.mu.Lock()
		p.last = s
		p.mu.Unlock()
	}
	return snap
}

func (p *recordingPoller) sample() signals.Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// failoverDecision is one decision of the engine, with the primary_load
// sample it was made on and when its leadership began.
type failoverDecision struct {
	at, sampled, tookOver time.Time
}

// pairDSN is a multi-host DSN over both servers of c as role, taking the
// one that accepts writes: what a client configured for a failover uses.
func pairDSN(t *testing.T, c *pgcluster.Cluster, role string) string {
	t.Helper()
	u, err := url.Parse(c.Primary.DSN(role))
	if err != nil {
		t.Fatal(err)
	}
	u.Host += ",127.0.0.1:" + strconv.Itoa(c.Replica.Port)
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	return u.String()
}

// The primary crashes (SIGKILL), the replica is promoted, and the leader,
// which lost its election session with the old primary, is elected again
// on the promoted server. Its sampler kept its last reading of the old
// primary, taken just before the crash and younger than its max age. No
// decision of the new leadership is made on it, or on any reading from
// before it took over: each uses a sample taken since. Before, the
// re-elected leader decided at once on the old primary's reading (a job
// read go on a primary that no longer existed). The sampler's interval is
// 2 s here (its max age 6 s), so the crash falls between two readings and
// the last one is still fresh when the promoted server takes writes.
func TestFailoverLeaderDecidesOnTheNewPrimary(t *testing.T) {
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	c, err := pgcluster.Start(sctx, pgcluster.Options{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = schema.Migrate(mctx, pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin))
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	pool, err := pgxpool.New(ctx, pairDSN(t, c, pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sampler, err := signals.New(signals.Config{PrimaryDSN: pairDSN(t, c, pgcluster.RoleMonitor), Cores: 2,
		Interval: 2 * time.Second, MaxAge: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sampler.Close)
	poller := &recordingPoller{Poller: sampler}
	logs := &pgtest.Buffer{}
	e := New(Deps{Log: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}), Pool: pool, Holds: noHolds{},
		Poller: poller, Controller: throttle.Config{MaxBudget: 10, InitialBudget: 10}, Tick: 500 * time.Millisecond})
	e.prepare = func(cfg throttle.Config) throttle.Config { return cfg }
	var mu sync.Mutex
	var decisions []failoverDecision
	// Published runs on Run's goroutine, in lead, right after the
	// decision: tookOver and the poller's last sample are the decision's.
	e.published = func(d throttle.Decision) {
		mu.Lock()
		decisions = append(decisions, failoverDecision{at: d.At, sampled: poller.sample().At, tookOver: e.tookOver})
		mu.Unlock()
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); e.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done; e.Close() })

	count := func() int { mu.Lock(); defer mu.Unlock(); return len(decisions) }
	pgtest.Eventually(t, 30*time.Second, func() error {
		if n := count(); n < 2 {
			return fmt.Errorf("%d decisions on the first primary; logs:\n%s", n, logs)
		}
		return nil
	})
	var termBefore int64
	if err := pool.QueryRow(ctx, "SELECT term FROM throttled.leader WHERE id = 1").Scan(&termBefore); err != nil {
		t.Fatal(err)
	}
	// Crash just after a reading: the next is 2 s away.
	pgtest.Eventually(t, 10*time.Second, func() error {
		s, _ := sampler.Snapshot().Get(signals.PrimaryLoad, nil)
		if age := time.Since(s.At); s.Err != nil || age > 300*time.Millisecond {
			return fmt.Errorf("last reading %s old (%v)", age, s.Err)
		}
		return nil
	})
	crashed := time.Now()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = c.CrashAndPromote(pctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()

	promotedDB := pgtest.Connect(t, c.Replica, pgcluster.RoleAdmin)
	var leader string
	var term int64
	var publishedAt time.Time
	pgtest.Eventually(t, 30*time.Second, func() error {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := promotedDB.QueryRow(qctx, "SELECT leader, term, published_at FROM throttled.leader WHERE id = 1").Scan(&leader, &term, &publishedAt); err != nil {
			return err
		}
		if term <= termBefore || !publishedAt.After(crashed) {
			return fmt.Errorf("the promoted server's leader row: term %d (before the crash %d), published %s", term, termBefore, publishedAt)
		}
		return nil
	})
	if leader != e.procID {
		t.Errorf("the promoted server's leader is %q; want the engine, %q", leader, e.procID)
	}

	mu.Lock()
	defer mu.Unlock()
	var after int
	var first failoverDecision
	for _, d := range decisions {
		if !d.tookOver.After(crashed) {
			continue // the leadership from before the crash, until it saw its session gone
		}
		if after == 0 {
			first = d
		}
		after++
		if !d.sampled.After(d.tookOver) {
			t.Errorf("decision at %s, in a leadership taken at %s, made on a reading of %s: from before it took over (the crash at %s)",
				d.at.Format("15:04:05.000"), d.tookOver.Format("15:04:05.000"), d.sampled.Format("15:04:05.000"), crashed.Format("15:04:05.000"))
		}
	}
	if after == 0 {
		t.Fatalf("no decision after the re-election; logs:\n%s", logs)
	}
	t.Logf("crash to promoted %.2f s; re-elected %.2f s after the crash, first decision %.2f s after it on a reading %.2f s after the re-election; %d decisions since",
		promoted.Sub(crashed).Seconds(), first.tookOver.Sub(crashed).Seconds(), first.at.Sub(crashed).Seconds(), first.sampled.Sub(first.tookOver).Seconds(), after)
}
