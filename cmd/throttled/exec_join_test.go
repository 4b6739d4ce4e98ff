package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// joinRows is each table's size: half of it old, the statement's. Neither
// run may finish at its start: an exec that took an idle sidecar's whole
// budget at once deleted 97,000 to 247,000 rows in its first 5 s.
const joinRows = 1_600_000

// joinWindow is an exec's start, over which its rows are counted.
const joinWindow = 5 * time.Second

// An exec that joins an idle leader starts as the same exec alone does
// (issue 52): at a quarter of its share, doubling while the signals allow
// (the controller's TestAnExecJoiningAnIdleLeaderStartsAsItWouldAlone).
// It once took the idle sidecar's whole budget, 10 batches a second, at
// once, its batches grew to 10,000 rows within 3 s, and the sidecar's
// canary read the foreground up to 5.8 times its target. Here, in its
// first 5 s it may delete at most twice the rows of the same exec started
// alone (--solo) from rest on a table made alike, each counted from its
// start as a process. The one alone opens its own sampler before its
// first batch (1.5 s) where the one that joins waits for a lease (1.1 s):
// its rows after its first batch are logged too, with each exec's
// progress.
func TestExecJoiningAnIdleLeaderStartsAsSlowlyAsAlone(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	cli(t, "migrate", "--dsn", c.Primary.DSN(pgcluster.RoleAdmin))
	if err := pgtest.ForgetLeader(ctx, admin); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"join_solo", "join_led"} {
		joinTable(t, admin, table)
	}
	joinSettle(t, admin, "")

	// Alone, from rest: no leader, no sidecar.
	solo := joinRun(t, admin, c, "join-solo", "join_solo", "--solo")
	// What it deleted is vacuumed now, not by autovacuum under the next
	// run, and the replica catches up.
	joinSettle(t, admin, "join_solo")

	// The idle leader: a sidecar whose one job never runs, at its
	// initial budget of 10 batches a second (a tenth of its default
	// max_budget), as much as the exec's --max-rate.
	setTokens(t)
	addr := freeAddr(t)
	path := t.TempDir() + "/throttled.hcl"
	joinConfig(t, path, c, addr)
	// After the sidecar stops: the next test's leader starts cold.
	t.Cleanup(func() { pgtest.ForgetLeader(context.Background(), admin) })
	logs := startRun(t, path, addr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sidecar log:\n%s", logs.String())
		}
	})
	pgtest.Eventually(t, 60*time.Second, func() error {
		var mode string
		var budget float64
		var at time.Time
		if err := admin.QueryRow(ctx, "SELECT mode, budget, published_at FROM throttled.leader WHERE id = 1").Scan(&mode, &budget, &at); err != nil {
			return err
		}
		// Idle: purge's share lent, so a job that joins may have it all.
		var purge float64
		if err := admin.QueryRow(ctx, "SELECT alloc_rate FROM throttled.workers WHERE job = 'purge' AND lease_until > now()").Scan(&purge); err != nil {
			return err
		}
		if pid, _ := leaderPID(t, admin); pid != os.Getpid() || mode != "running" || budget < 10 || purge > 1 || time.Since(at) > 2*time.Second {
			return fmt.Errorf("leader pid %d, mode %s, budget %v, purge at %v/s, published %s ago", pid, mode, budget, purge, time.Since(at))
		}
		return nil
	})
	led := joinRun(t, admin, c, "join-led", "join_led")
	if pid, _ := leaderPID(t, admin); pid != os.Getpid() {
		t.Fatalf("leader pid %d after the joined run; want the sidecar (%d): the exec did not follow it", pid, os.Getpid())
	}
	t.Logf("alone: first batch %s after its start; %d rows in its first %s (%d in the %s after its first batch); second by second:\n%s",
		solo.lead, solo.rows, joinWindow, solo.fromFirst, joinWindow, solo.progress)
	t.Logf("joining the idle sidecar: first batch %s after its start; %d rows in its first %s (%d in the %s after its first batch); second by second:\n%s",
		led.lead, led.rows, joinWindow, led.fromFirst, joinWindow, led.progress)
	t.Logf("rows in the first %s: alone %d, joining %d (%.2fx); after the first batch %.2fx", joinWindow, solo.rows, led.rows,
		float64(led.rows)/float64(solo.rows), float64(led.fromFirst)/float64(solo.fromFirst))
	if led.rows > 2*solo.rows {
		t.Fatalf("an exec joining an idle leader deleted %d rows in its first %s, %.2f times the %d of the same exec alone; want at most twice",
			led.rows, joinWindow, float64(led.rows)/float64(solo.rows), solo.rows)
	}
}

// joinTable makes table as oldNew does, with joinRows rows, analysed, so
// both runs plan their batches alike.
func joinTable(t *testing.T, admin *pgx.Conn, table string) {
	t.Helper()
	oldNew(t, admin, table, joinRows)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	if _, err := admin.Exec(context.Background(), "VACUUM (ANALYZE) "+table); err != nil {
		t.Fatal(err)
	}
}

// joinSettle vacuums table (if any), checkpoints, and waits until the
// replica has replayed everything, so a run starts under no lag, vacuum
// or checkpoint that the tables or the last run made.
func joinSettle(t *testing.T, admin *pgx.Conn, table string) {
	t.Helper()
	ctx := context.Background()
	if table != "" {
		if _, err := admin.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 2*time.Minute, func() error {
		var behind int64
		if err := admin.QueryRow(ctx, "SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)), -1)::bigint FROM pg_stat_replication").Scan(&behind); err != nil {
			return err
		}
		if behind != 0 {
			return fmt.Errorf("replica %d bytes behind", behind)
		}
		return nil
	})
}

// joinConfig writes a sidecar configuration at the controller's
// defaults: max_budget 100, so an initial budget of 10.
func joinConfig(t *testing.T, path string, c *pgcluster.Cluster, addr string) {
	t.Helper()
	src := fmt.Sprintf(`primary {
  dsn              = %q
  coordination_dsn = %q
  cores            = 2
}
replica %q {
  policy = "required"
}
listen {
  address = %q
}
token "ops" {
  secret = env("THROTTLED_TEST_TOKEN_OPS")
  scopes = ["read", "pause", "admin"]
}
token "worker" {
  secret = env("THROTTLED_TEST_TOKEN_WORKER")
  scopes = ["work"]
}
job "purge" {
  weight = 1
}
`, c.Primary.DSN(pgcluster.RoleMonitor), c.Primary.DSN(pgcluster.RoleAdmin), pgcluster.ReplicaName, addr)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
}

// joinResult is what one exec did at its start: the rows it deleted in
// joinWindow from its start, and in joinWindow from its first batch; how
// long its first batch took to commit; its progress, a line a second.
type joinResult struct {
	rows, fromFirst int64
	lead            time.Duration
	progress        string
}

// joinRun runs an exec of job on table (at exec's defaults: --max-rate
// 10, batches from 100 rows toward 1 s, at most 10,000) as a process of
// the test binary, counts the rows it deletes at its start from its
// checkpoint, and stops it.
func joinRun(t *testing.T, admin *pgx.Conn, c *pgcluster.Cluster, job, table string, extra ...string) joinResult {
	t.Helper()
	args := execArgs(c, job, table, append([]string{"--replica", pgcluster.ReplicaName, "--json"}, extra...)...)
	var out pgtest.Buffer
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "THROTTLED_TEST_RUN_MAIN=1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("exec %s output:\n%s", job, out.String())
		}
	})
	var res joinResult
	var first time.Time
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for time.Since(started) < joinWindow || first.IsZero() || time.Since(first) < joinWindow {
		if time.Since(started) > time.Minute {
			t.Fatalf("%s: no batch within a minute of its start", job)
		}
		<-poll.C
		r, _ := jobProgress(t, admin, job)
		if r > 0 && first.IsZero() {
			first = time.Now()
			res.lead = first.Sub(started).Round(time.Millisecond)
		}
		if time.Since(started) <= joinWindow {
			res.rows = r
		}
		if !first.IsZero() && time.Since(first) <= joinWindow {
			res.fromFirst = r
		}
	}
	stop()
	if max(res.rows, res.fromFirst) >= joinRows/2 {
		t.Fatalf("%s deleted all %d old rows at its start: the table is too small to measure it", job, joinRows/2)
	}
	res.progress = joinProgress(out.String())
	return res
}

// joinProgress is exec --json's progress objects, one line a second.
func joinProgress(out string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var p execProgress
		if line := sc.Text(); !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &p) != nil || p.BatchSize == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s rows %d, rate %.3g/s, batch size %d, %s: %s\n", p.At.Format("15:04:05"), p.Rows, p.Rate, p.BatchSize, p.State, p.Reason)
	}
	return b.String()
}
