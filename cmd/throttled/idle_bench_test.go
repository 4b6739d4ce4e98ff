//go:build lab

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/lab/benchdoc"
	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// The idle-primary row of `make bench` (issue 32): on the throwaway
// primary and replica with nothing else running, a cleanup of the older
// half of a 400,000-row table by `throttled exec` with its defaults (the
// foreground-latency canary on, the database migrated) against its
// ceiling, a plain loop of the same 2,000-row batches at the same 4 a
// second. The runs go ceiling, exec, exec, ceiling (ABBA), every one from
// a table made again, so a drift of the machine weighs on both alike.
//
//	go test -run '^$' -bench '^BenchmarkIdlePrimary$' -benchtime 1x -timeout 20m ./cmd/throttled
//
// THROTTLED_BENCH_DOC=file renders the runs between <!-- idle:begin -->
// and <!-- idle:end --> of file (or, without the markers, as the whole
// file).

const (
	idleTable     = "idle_events"
	idleRows      = 400_000 // the older half is the cleanup's
	idleBatch     = 2000
	idleRate      = 4.0 // batches a second, exec's --max-rate and the ceiling's pace
	idleJob       = "idle-cleanup"
	idleExecLimit = 70 * time.Second // an exec not done by then is stopped and counted as far as it got
)

// benchDelete is the cleanup's statement on table, $1 the batch size: the
// older rows first, as a user would write it.
func benchDelete(table string) string {
	return fmt.Sprintf(`DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE created_at < now() - interval '30 days' ORDER BY id LIMIT $1)`, table)
}

// makeEvents drops and creates table with rows rows, the first (lower
// ids) old of them 60 days old and the rest a day old, forgets the job's
// checkpoint, and waits for the replica to replay it all.
func makeEvents(ctx context.Context, c *pgcluster.Cluster, admin *pgxpool.Pool, table string, rows, old int, job string) error {
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + table,
		"CREATE TABLE " + table + " (id bigint NOT NULL, created_at timestamptz NOT NULL, payload text NOT NULL)",
		fmt.Sprintf(`INSERT INTO %s SELECT g, CASE WHEN g <= %d THEN now() - interval '60 days' ELSE now() - interval '1 day' END, md5(g::text)
			FROM generate_series(1, %d) g`, table, old, rows),
		"ALTER TABLE " + table + " ADD PRIMARY KEY (id)",
		"VACUUM (ANALYZE) " + table,
		"DELETE FROM throttled.checkpoints WHERE job = '" + job + "'",
		"CHECKPOINT",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("%.40s: %w", q, err)
		}
	}
	return replay.Settle(ctx, c, admin, 2*time.Minute)
}

// benchSetup opens the admin pool a bench row sets up with, migrates the
// sampler's database as `throttled migrate` does, and forgets the last
// leader's decision.
func benchSetup(b *testing.B, c *pgcluster.Cluster) *pgxpool.Pool {
	b.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "bench_setup"
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(admin.Close)
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"migrate", "--dsn", c.Primary.DSN(pgcluster.RoleAdmin)}, &out, &errOut); code != exitOK {
		b.Fatalf("throttled migrate: exit %d: %s", code, errOut.String())
	}
	return admin
}

// forgetDecision removes the last leader's published decision, so the
// next exec starts cold, as on a fresh cluster.
func forgetDecision(ctx context.Context, admin *pgxpool.Pool) error {
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return pgtest.ForgetLeader(ctx, conn.Conn())
}

// execArgsFor is the exec command line the rows run: the flags,
// everything else default (the canary on).
func execArgsFor(c *pgcluster.Cluster, job, table string) []string {
	return []string{"exec", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor), "--job-dsn", c.Primary.DSN(pgcluster.RoleAdmin),
		"--replica-dsn", c.Replica.DSN(pgcluster.RoleMonitor), "--cores", "2", "--job", job,
		"--max-rate", fmt.Sprint(idleRate), "--max-batch-size", fmt.Sprint(idleBatch), "--batch-size", fmt.Sprint(idleBatch),
		"--json", "--sql", benchDelete(table)}
}

// execWatch reads exec --json's output as it comes: the last progress
// object, seconds by state and binding, the reasons that named an
// emergency cut, and the summary.
type execWatch struct {
	mu        sync.Mutex
	last      execProgress
	lines     int
	where     map[string]int // "state" or "state: binding" -> seconds
	emergency []string       // distinct reasons naming an emergency cut
	summary   *execSummary
	other     []string
	start     []string // the first progress objects: rate, state, code of the reason
}

func newExecWatch() (*execWatch, io.WriteCloser) {
	w := &execWatch{where: map[string]int{}}
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			w.line(sc.Bytes())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return w, pw
}

func (w *execWatch) line(l []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var probe struct {
		Summary bool `json:"summary"`
	}
	if json.Unmarshal(l, &probe) != nil {
		w.other = append(w.other, string(l))
		return
	}
	if probe.Summary {
		var s execSummary
		if json.Unmarshal(l, &s) == nil {
			w.summary = &s
		}
		return
	}
	var p execProgress
	if json.Unmarshal(l, &p) != nil {
		return
	}
	w.last, w.lines = p, w.lines+1
	if w.lines <= 12 {
		w.start = append(w.start, fmt.Sprintf("%.2f/s %d rows %s", p.Rate, p.Rows, p.Reason))
	}
	key := p.State
	if p.Binding != "" {
		key += ": " + p.Binding
	}
	w.where[key]++
	// One cut's reason is quoted in the reasons of the seconds after it,
	// behind other words: the cut is what follows "emergency cut".
	if i := strings.Index(p.Reason, "emergency cut"); i >= 0 {
		cut := strings.TrimRight(p.Reason[i:], ")")
		if !slices.Contains(w.emergency, cut) {
			w.emergency = append(w.emergency, cut)
		}
	}
}

func (w *execWatch) progress() (execProgress, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.lines
}

// whereText is where the seconds went: exec's own account once its
// summary is out (why_slow, as throttled_jobs_limited_seconds_total counts
// them: "ran 28s: 85 % at full rate, 15 % slow start"), else from its
// progress (one object a second), the largest share first: "running:
// foreground_latency 12 s, throttled 5 s".
func (w *execWatch) whereText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.summary != nil && w.summary.WhySlow != "" {
		return w.summary.WhySlow
	}
	keys := make([]string, 0, len(w.where))
	for k := range w.where {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if w.where[a] != w.where[b] {
			return w.where[b] - w.where[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d s", k, w.where[k]))
	}
	return strings.Join(parts, ", ")
}

// emergencies is the distinct emergency cuts exec's progress named.
func (w *execWatch) emergencies() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.emergency)
}

// idleRun is one run of the idle row.
type idleRun struct {
	kind        string // "ceiling" or "exec"
	rows        int64
	took        time.Duration // the loop's, or exec's own duration_seconds (job.Run)
	wall        time.Duration // from the command's start, connecting and leading included
	done        bool          // the statement affected no row before the limit
	steal       float64
	where       string
	emergencies []string
}

func (r idleRun) perSec() float64 { return float64(r.rows) / r.took.Seconds() }

// plainLoop runs statement with limit batch at rate batches a second (a
// ticker; a batch longer than the tick delays the next) until it affects
// no row, ctx ends or stop returns true, and returns the rows it deleted
// and how long it took.
func plainLoop(ctx context.Context, pool *pgxpool.Pool, statement string, batch int, rate float64, count func(int64)) (int64, time.Duration, bool, error) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	start := time.Now()
	var rows int64
	for {
		tag, err := pool.Exec(ctx, statement, batch)
		if err != nil {
			if ctx.Err() != nil {
				return rows, time.Since(start), false, nil
			}
			return rows, time.Since(start), false, err
		}
		rows += tag.RowsAffected()
		if count != nil {
			count(tag.RowsAffected())
		}
		if tag.RowsAffected() == 0 {
			return rows, time.Since(start), true, nil
		}
		select {
		case <-ctx.Done():
			return rows, time.Since(start), false, nil
		case <-tick.C:
		}
	}
}

// loopPool is a pool of one connection for a plain loop, its sessions
// named.
func loopPool(ctx context.Context, c *pgcluster.Cluster, app string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = 1, 1
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	return pgxpool.NewWithConfig(ctx, cfg)
}

func BenchmarkIdlePrimary(b *testing.B) {
	c := pgtest.Cluster(b)
	admin := benchSetup(b, c)
	ctx := context.Background()
	begun, rev := time.Now(), benchRevision()
	var runs []idleRun
	for i, kind := range []string{"ceiling", "exec", "exec", "ceiling"} {
		if err := makeEvents(ctx, c, admin, idleTable, idleRows, idleRows/2, idleJob); err != nil {
			b.Fatal(err)
		}
		steal := replay.StartSteal()
		var r idleRun
		switch kind {
		case "ceiling":
			pool, err := loopPool(ctx, c, "idle_ceiling")
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			rows, took, done, err := plainLoop(ctx, pool, benchDelete(idleTable), idleBatch, idleRate, nil)
			pool.Close()
			if err != nil {
				b.Fatal(err)
			}
			r = idleRun{kind: kind, rows: rows, took: took, wall: time.Since(start), done: done}
		case "exec":
			if err := forgetDecision(ctx, admin); err != nil {
				b.Fatal(err)
			}
			r = idleExec(b, c)
		}
		r.steal = steal.Share()
		b.Logf("run %d %-7s %6d rows in %5.1f s (wall %5.1f s): %5.0f rows/s, steal %s %%, done %v; %s; emergency cuts %d",
			i+1, r.kind, r.rows, r.took.Seconds(), r.wall.Seconds(), r.perSec(), replay.StealText(r.steal), r.done, r.where, len(r.emergencies))
		runs = append(runs, r)
	}
	ceiling, execs := idleMean(runs, "ceiling"), idleMean(runs, "exec")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ceiling, "ceiling-rows/s")
	b.ReportMetric(execs, "exec-rows/s")
	b.ReportMetric(execs/ceiling, "of-ceiling")
	doc := idleReport(rev, runs, ceiling, execs, time.Since(begun))
	b.Log("\n" + doc)
	writeBenchDoc(b, "idle", doc)
}

// idleExec runs exec on the idle table until it is done or idleExecLimit.
func idleExec(b *testing.B, c *pgcluster.Cluster) idleRun {
	b.Helper()
	w, out := newExecWatch()
	var errOut pgtest.Buffer
	// Canceled, not a deadline: exec then stops between batches, as after
	// SIGINT, and prints its summary.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	limit := time.AfterFunc(idleExecLimit, cancel)
	defer limit.Stop()
	start := time.Now()
	code := run(ctx, execArgsFor(c, idleJob, idleTable), out, &errOut)
	wall := time.Since(start)
	out.Close()
	if code != exitOK && code != exitInterrupted {
		b.Fatalf("exec: exit %d: %s", code, errOut.String())
	}
	// The summary is exec's last line; the reader may not have parsed it
	// yet.
	var sum *execSummary
	pgtest.Eventually(b, 5*time.Second, func() error {
		w.mu.Lock()
		sum = w.summary
		w.mu.Unlock()
		if sum == nil {
			return fmt.Errorf("no summary from exec (exit %d)", code)
		}
		return nil
	})
	w.mu.Lock()
	for i, l := range w.start {
		b.Logf("exec's second %d: %s", i+1, l)
	}
	w.mu.Unlock()
	return idleRun{kind: "exec", rows: sum.Rows, took: time.Duration(sum.DurationS * float64(time.Second)), wall: wall,
		done: sum.Result == "done", where: w.whereText(), emergencies: w.emergencies()}
}

func idleMean(runs []idleRun, kind string) float64 {
	var sum float64
	var n int
	for _, r := range runs {
		if r.kind == kind {
			sum += r.perSec()
			n++
		}
	}
	return sum / float64(n)
}

// idleReport renders the idle row's runs as markdown.
func idleReport(rev string, runs []idleRun, ceiling, execs float64, took time.Duration) string {
	var bd strings.Builder
	fmt.Fprintf(&bd, "Generated by `make bench` (`BenchmarkIdlePrimary`, cmd/throttled/idle_bench_test.go) at %s; never edited by hand. "+
		"Machine: %d cores (%s/%s), %s; the whole row took %s. "+
		"On the throwaway primary and streaming replica with nothing else running, the database migrated (`throttled migrate`, so the "+
		"foreground-latency canary runs): a table of %d rows whose older %d are deleted by `%s` with $1 = %d. "+
		"The ceiling is a plain loop of those batches at %g a second (a ticker, no throttling); exec is "+
		"`throttled exec --cores 2 --max-rate %g --max-batch-size %d --batch-size %d --replica-dsn ... --json --sql ...`, every other flag "+
		"default, its leader's last decision forgotten first. Runs in the order ceiling, exec, exec, ceiling, every one from the table made "+
		"again; an exec not done after %s is stopped and counted as far as it got. exec's time is its own `duration_seconds` (the job's run: "+
		"waiting to lead, slow start and every limit included; connecting not); wall is from the command's start. Steal is the share of the "+
		"CPU time the machine wanted that the hypervisor gave to other guests (/proc/stat) over the run. Where the time went is exec's own "+
		"summary (`why_slow`: the seconds `throttled_jobs_limited_seconds_total` counts at each limit).\n\n",
		rev, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), took.Round(time.Second),
		idleRows, idleRows/2, benchDelete(idleTable), idleBatch, idleRate, idleRate, idleBatch, idleBatch, idleExecLimit)
	bd.WriteString("| run | what | rows | seconds | wall s | rows/s | of the ceiling | steal % | emergency cuts | where exec's time went |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, r := range runs {
		rows := fmt.Sprint(r.rows)
		if !r.done {
			rows += " (not done)"
		}
		em, where := "–", "–"
		if r.kind == "exec" {
			em, where = fmt.Sprint(len(r.emergencies)), r.where
		}
		fmt.Fprintf(&bd, "| %d | %s | %s | %.1f | %.1f | %.0f | %.2f | %s | %s | %s |\n", i+1, r.kind, rows, r.took.Seconds(), r.wall.Seconds(),
			r.perSec(), r.perSec()/ceiling, replay.StealText(r.steal), em, where)
	}
	met := "not met"
	if execs/ceiling >= 0.9 {
		met = "met"
	}
	fmt.Fprintf(&bd, "\nexec's mean rows/s over the ceiling's: **%.2f** (%.0f against %.0f rows/s); goal at least 0.9: %s.\n", execs/ceiling, execs, ceiling, met)
	for i, r := range runs {
		for _, e := range r.emergencies {
			fmt.Fprintf(&bd, "\n- run %d's emergency cut: %s", i+1, e)
		}
	}
	return bd.String()
}

// benchRevision names the commit the tree is at, and whether it has
// changes of its own: read when a row starts, as near as a test can get
// to when its binary was built.
func benchRevision() string {
	rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "an unknown commit"
	}
	s := "commit " + strings.TrimSpace(string(rev))
	if exec.Command("git", "diff", "--quiet", "HEAD", "--", "*.go", "go.mod", "go.sum").Run() != nil {
		s += " with Go changes not committed"
	}
	return s
}

// writeBenchDoc writes body between <!-- section:begin --> and
// <!-- section:end --> of $THROTTLED_BENCH_DOC; where the file lacks them
// (or is not there), it appends the section, markers and all.
func writeBenchDoc(b *testing.B, section, body string) {
	b.Helper()
	path := os.Getenv("THROTTLED_BENCH_DOC")
	if path == "" || b.Failed() {
		return
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	out, err := benchdoc.Splice(string(old), section, body)
	if err != nil {
		out = string(old) + "<!-- " + section + ":begin -->\n" + strings.TrimRight(body, "\n") + "\n<!-- " + section + ":end -->\n"
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		b.Fatal(err)
	}
}
