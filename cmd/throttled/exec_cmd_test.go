package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/chaos"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/status"
)

const deleteOld = `DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE created_at < now() - interval '30 days' ORDER BY id LIMIT $1)`

// oldNew creates table with n rows, every other one 60 days old, and
// returns how many are older than 30 days.
func oldNew(t *testing.T, admin *pgx.Conn, table string, n int) int64 {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + table,
		"CREATE TABLE " + table + " (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)",
		fmt.Sprintf(`INSERT INTO %s SELECT g, CASE WHEN g %% 2 = 0 THEN now() - interval '60 days' ELSE now() END FROM generate_series(1, %d) g`, table, n),
		"DELETE FROM throttled.checkpoints WHERE job = '" + strings.ReplaceAll(table, "_", "-") + "'",
	} {
		if _, err := admin.Exec(ctx, q); err != nil && !strings.Contains(err.Error(), "throttled.checkpoints") {
			t.Fatal(err)
		}
	}
	return oldCount(t, admin, table)
}

func oldCount(t *testing.T, admin *pgx.Conn, table string) int64 {
	t.Helper()
	var n int64
	if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE created_at < now() - interval '30 days'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func checkpoint(admin *pgx.Conn, job string) (rows, batches int64, err error) {
	err = admin.QueryRow(context.Background(), "SELECT rows, batches FROM throttled.checkpoints WHERE job = $1", job).Scan(&rows, &batches)
	return rows, batches, err
}

// deleteOldShared is deleteOld for several workers on one table at once:
// each skips the rows another holds instead of queueing behind them and
// finding them gone (0 rows, which ends a run).
const deleteOldShared = `DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE created_at < now() - interval '30 days' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)`

func execArgs(c *pgcluster.Cluster, job, table string, extra ...string) []string {
	return execSQLArgs(c, job, fmt.Sprintf(deleteOld, table), extra...)
}

func execSQLArgs(c *pgcluster.Cluster, job, sql string, extra ...string) []string {
	return append([]string{"exec", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor), "--job-dsn", c.Primary.DSN(pgcluster.RoleAdmin),
		"--cores", "2", "--job", job, "--sql", sql}, extra...)
}

func TestParseExecFlags(t *testing.T) {
	base := []string{"--primary-dsn", "postgres://h/db", "--cores", "2", "--job", "purge", "--sql", "DELETE FROM t WHERE id IN (SELECT id FROM t LIMIT $1)"}
	if o, err := parseExecFlags(base, noEnv, io.Discard); err != nil || o.jobDSN != "postgres://h/db" || o.initRate != 2.5 { // a quarter of the default --max-rate 10
		t.Fatalf("%+v, %v", o, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cores", "2"}, "--primary-dsn (or THROTTLED_PRIMARY_DSN, or --config) is required"},
		{append(base, "--job", "Purge Now"), `--job: status: invalid job name "Purge Now"`},
		{append(base, "--sql", "DELETE FROM t"), "--sql must use $1 for the batch size"},
		{append(base, "--max-rate", "0"), "--max-rate must be a positive number"},
		{append(base, "--initial-rate", "50"), "--initial-rate must be positive and at most --max-rate 10, got 50"},
		{append(base, "--quiet-period", "0s"), "--quiet-period must be positive"},
		{append(base, "--max-attempts", "0"), "--max-attempts must be at least 1"},
		{append(base, "--max-outage", "-1s"), "--max-outage must be positive"},
		{append(base, "--cores", "-3"), "--cores must be a positive number of CPU cores, got -3"},
	} {
		if _, err := parseExecFlags(tc.args, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args[len(tc.args)-2:], err, tc.want)
		}
	}
	var errOut bytes.Buffer
	if code := run(context.Background(), append([]string{"exec"}, append(base, "--max-batch-size", "-5")...), io.Discard, &errOut); code != exitUsage ||
		!strings.Contains(errOut.String(), "--max-batch-size -5 must not be below --min-batch-size 1") {
		t.Fatalf("bad batch bounds: exit %d, %s", code, errOut.String())
	}
}

func FuzzParseExecFlags(f *testing.F) {
	f.Add("--primary-dsn p --cores 2 --job purge --sql $1 --max-rate 5 --initial-rate 1")
	f.Add("--cores NaN --max-rate Inf --job a.b-c_d --sql x$1")
	f.Fuzz(func(t *testing.T, line string) {
		o, err := parseExecFlags(strings.Fields(line), noEnv, io.Discard)
		if err != nil {
			return
		}
		if !(o.cores > 0) || !(o.maxRate > 0) || !(o.initRate > 0) || o.initRate > o.maxRate || !strings.Contains(o.sql, "$1") || o.primaryDSN == "" {
			t.Fatalf("accepted %q as %+v", line, o)
		}
	})
}

func TestExecDeletesExactlyTheOldRows(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	old := oldNew(t, admin, "exec_all", 200_000)
	var out, errOut bytes.Buffer
	code := run(context.Background(), execArgs(c, "exec-all", "exec_all", "--max-rate", "50", "--initial-rate", "50",
		"--batch-size", "2000", "--max-batch-size", "20000", "--target-batch-duration", "300ms"), &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	var oldLeft, recent int64
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE created_at < now() - interval '30 days'),
		count(*) FILTER (WHERE created_at >= now() - interval '30 days') FROM exec_all`).Scan(&oldLeft, &recent); err != nil {
		t.Fatal(err)
	}
	if oldLeft != 0 || recent != 100_000 {
		t.Fatalf("left %d old rows (want 0) and %d recent (want 100000)", oldLeft, recent)
	}
	rows, _, err := checkpoint(admin, "exec-all")
	if err != nil || rows != old {
		t.Fatalf("checkpoint rows %d, %v; want %d", rows, err, old)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("done: %d rows in", old)) {
		t.Fatalf("output:\n%s", out.String())
	}
	// The summary line says where the time went.
	if !regexp.MustCompile(`errors\); ran [0-9.]+m?s?[0-9.]*s?: [0-9]+ % `).MatchString(out.String()) {
		t.Fatalf("no why in the summary line:\n%s", out.String())
	}
}

func TestExecDryRunChangesNothing(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	old := oldNew(t, admin, "exec_dry", 1000)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), execArgs(c, "exec-dry", "exec_dry", "--dry-run"), &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "Delete on exec_dry") || !strings.Contains(out.String(), "nothing was changed") {
		t.Fatalf("dry run output:\n%s", out.String())
	}
	if n := oldCount(t, admin, "exec_dry"); n != old {
		t.Fatalf("dry run deleted %d rows", old-n)
	}
}

func TestExecStopsOnANonRetryableError(t *testing.T) {
	c := pgtest.Cluster(t)
	var out, errOut bytes.Buffer
	args := []string{"exec", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor), "--job-dsn", c.Primary.DSN(pgcluster.RoleAdmin),
		"--cores", "2", "--job", "exec-broken", "--initial-rate", "5", "--sql", "DELETE FROM no_such_table WHERE id < $1"}
	code := run(context.Background(), args, &out, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "not retryable") || !strings.Contains(errOut.String(), "no_such_table") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

// TestExecMaxOutage: a job database that goes away mid-run is ridden
// out for --max-outage, not failed at the first refused connection, and
// then fails the run with the reason.
func TestExecMaxOutage(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	oldNew(t, admin, "exec_outage", 60_000)
	proxy, err := chaos.NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Primary.Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	jobDSN, err := url.Parse(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	jobDSN.Host = proxy.Addr()
	args := []string{"exec", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor), "--job-dsn", jobDSN.String(),
		"--cores", "2", "--job", "exec-outage", "--sql", fmt.Sprintf(deleteOld, "exec_outage"),
		"--initial-rate", "5", "--max-rate", "5", "--batch-size", "500", "--max-batch-size", "500", "--max-outage", "1500ms"}
	type result struct {
		code       int
		errOut     string
		outageTook time.Duration
	}
	done := make(chan result, 1)
	var outageStart atomic.Int64
	go func() {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		done <- result{code, errOut.String(), time.Since(time.Unix(0, outageStart.Load()))}
	}()
	pgtest.Eventually(t, 30*time.Second, func() error {
		if _, b, err := checkpoint(admin, "exec-outage"); err != nil || b < 3 {
			return fmt.Errorf("%d batches committed, %v", b, err)
		}
		return nil
	})
	// The job's database goes away: open sessions are cut and every new
	// connection is refused.
	outageStart.Store(time.Now().UnixNano())
	proxy.Close()
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("exec still running a minute into an outage it was told to ride out for 1.5s")
	}
	if r.code != exitError || !strings.Contains(r.errOut, "database unreachable for") || !strings.Contains(r.errOut, "MaxOutage 1.5s") {
		t.Fatalf("exit %d after %s of outage: %s", r.code, r.outageTook, r.errOut)
	}
	// It rode the outage out before failing, instead of failing at the
	// first refused connection.
	if r.outageTook < 1500*time.Millisecond {
		t.Fatalf("failed %s into the outage, before --max-outage: %s", r.outageTook, r.errOut)
	}
}

func TestExecResumesAfterSIGKILLWithNothingAppliedTwice(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	old := oldNew(t, admin, "exec_kill", 60_000)
	// The batch size is pinned: the count of batches below is every
	// row's once only at a fixed size, and a job shrinks its batches
	// while the canary reads the foreground stretched (on a loaded
	// machine, a smaller batch made 62 where 61 were due).
	args := execArgs(c, "exec-kill", "exec_kill", "--max-rate", "10", "--initial-rate", "10", "--batch-size", "500", "--min-batch-size", "500", "--max-batch-size", "500")
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "THROTTLED_TEST_RUN_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 30*time.Second, func() error {
		if _, b, err := checkpoint(admin, "exec-kill"); err != nil || b < 10 {
			return fmt.Errorf("%d batches committed, %v", b, err)
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The killed process's session goes away and its open batch rolls back.
	pgtest.Eventually(t, 10*time.Second, func() error {
		var n int
		err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'throttled:exec-kill'").Scan(&n)
		if err == nil && n > 0 {
			err = errors.New("the killed job's session is still there")
		}
		return err
	})
	rowsAtKill, batchesAtKill, err := checkpoint(admin, "exec-kill")
	if err != nil {
		t.Fatal(err)
	}
	if deleted := old - oldCount(t, admin, "exec_kill"); deleted != rowsAtKill {
		t.Fatalf("after SIGKILL %d rows are gone but the checkpoint says %d: batch and checkpoint are not one transaction", deleted, rowsAtKill)
	}
	if rowsAtKill >= old {
		t.Fatalf("the job finished before the kill (%d of %d rows)", rowsAtKill, old)
	}
	t.Logf("killed after %d batches, %d rows\n%s", batchesAtKill, rowsAtKill, out.String())

	var out2, errOut bytes.Buffer
	if code := run(context.Background(), args, &out2, &errOut); code != exitOK {
		t.Fatalf("rerun: exit %d: %s", code, errOut.String())
	}
	rows, batches, err := checkpoint(admin, "exec-kill")
	if err != nil {
		t.Fatal(err)
	}
	if n := oldCount(t, admin, "exec_kill"); n != 0 || rows != old {
		t.Fatalf("after the rerun: %d old rows left, checkpoint rows %d (want 0 and %d)", n, rows, old)
	}
	// 500 rows a batch: every row deleted exactly once means exactly
	// old/500 full batches, plus the final empty one.
	if want := old/500 + 1; batches != want {
		t.Fatalf("%d batches recorded; want %d (%d rows / 500, plus the last, empty one)", batches, want, old)
	}
}

func TestExecPausesUnderCriticalLoadAndResumes(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	oldNew(t, admin, "exec_load", 100_000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, execArgs(c, "exec-load", "exec_load", "--max-rate", "10", "--initial-rate", "10", "--batch-size", "20",
			"--max-batch-size", "20", "--quiet-period", "2s"), io.Discard, &errOut)
	}()
	progressed := func(min int64) func() error {
		return func() error {
			if r, _, err := checkpoint(admin, "exec-load"); err != nil || r < min {
				return fmt.Errorf("rows %d, %v", r, err)
			}
			return nil
		}
	}
	pgtest.Eventually(t, 20*time.Second, progressed(200))

	load, err := c.CPULoad(context.Background(), 2, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	// Critical after 3 samples at 1.0: the deletes stop within a few
	// seconds and stay stopped while the load lasts.
	var last int64
	var lastChange time.Time
	pgtest.Eventually(t, 15*time.Second, func() error {
		r, _, err := checkpoint(admin, "exec-load")
		if err != nil {
			return err
		}
		if r != last {
			last, lastChange = r, time.Now()
		}
		if time.Since(lastChange) < 2*time.Second {
			return fmt.Errorf("still deleting: %d rows", r)
		}
		return nil
	})
	stopped := last
	pgtest.Steady(t, 3*time.Second, func() error {
		if r, _, _ := checkpoint(admin, "exec-load"); r != stopped {
			return fmt.Errorf("deleted %d rows during critical load", r-stopped)
		}
		return nil
	})
	if err := load.Stop(); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 30*time.Second, progressed(stopped+100))
	cancel()
	select {
	case code := <-done:
		if code != exitInterrupted {
			t.Fatalf("exit %d after cancel: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("exec did not stop after cancel")
	}
	// Interrupted between batches: the checkpoint matches the table.
	rows, _, _ := checkpoint(admin, "exec-load")
	if deleted := int64(50_000) - oldCount(t, admin, "exec_load"); deleted != rows {
		t.Fatalf("%d rows deleted, checkpoint says %d", deleted, rows)
	}
}

func TestMigrateCommand(t *testing.T) {
	c := pgtest.Cluster(t)
	var out, errOut bytes.Buffer
	// --primary-dsn, as every other command says it; --dsn, migrate's
	// first name for it, still works.
	for _, flag := range []string{"--primary-dsn", "--dsn"} {
		out.Reset()
		if code := run(context.Background(), []string{"migrate", flag, c.Primary.DSN(pgcluster.RoleAdmin)}, &out, &errOut); code != exitOK {
			t.Fatalf("migrate %s: exit %d: %s", flag, code, errOut.String())
		}
	}
	if !strings.Contains(out.String(), "is up to date") {
		t.Fatalf("second migrate: %s", out.String())
	}
	if code := run(context.Background(), []string{"migrate"}, &out, &errOut); code != exitUsage {
		t.Fatalf("migrate without a DSN: exit %d", code)
	}
}

// exec --json prints one JSON object a second and a summary object last:
// every line parses, and the summary has the rows the table lost.
func TestExecJSONLinesAndSummary(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	old := oldNew(t, admin, "exec_json", 40_000)
	var out, errOut bytes.Buffer
	code := run(context.Background(), execArgs(c, "exec-json", "exec_json", "--json", "--max-rate", "4", "--initial-rate", "4",
		"--batch-size", "2000", "--max-batch-size", "2000"), &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("want progress lines and a summary, got:\n%s", out.String())
	}
	for _, l := range lines[:len(lines)-1] {
		var p execProgress
		if err := json.Unmarshal([]byte(l), &p); err != nil || p.State == "" || p.At.IsZero() {
			t.Errorf("progress line %q: %+v, %v", l, p, err)
		}
	}
	var s execSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || !s.Summary || s.Result != "done" || s.Rows != old || s.Batches == 0 ||
		s.DurationS <= 0 || s.PausedWhy == nil {
		t.Errorf("summary %q: %+v, %v; want done with %d rows", lines[len(lines)-1], s, err, old)
	}
	// Where the time went: each second at one why of the bounded set,
	// about the run's duration in all, and the line that sums it up.
	total := 0.0
	for w, secs := range s.LimitedS {
		if !slices.Contains(status.Whys(), status.Why(w)) || secs < 0 {
			t.Errorf("limited_seconds[%q] = %v: not a why of the set", w, secs)
		}
		total += secs
	}
	if total < s.DurationS/2 || total > s.DurationS+0.5 {
		t.Errorf("limited_seconds %v add up to %.1f s of a %.1f s run", s.LimitedS, total, s.DurationS)
	}
	t.Logf("limited_seconds %v, why_slow %q", s.LimitedS, s.WhySlow)
	if !strings.HasPrefix(s.WhySlow, "ran ") || !strings.Contains(s.WhySlow, " % ") {
		t.Errorf("why_slow %q", s.WhySlow)
	}
}
