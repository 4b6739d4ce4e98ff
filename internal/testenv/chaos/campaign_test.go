//go:build lab

// The campaign drives the replay's foreground (internal/lab/replay), so its
// files build with the lab tag, as make test and make chaos run them; the
// proxy's own test runs in either build.

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar/remote"
)

func TestMain(m *testing.M) {
	if os.Getenv(coordinatedEnv) != "" {
		os.Exit(coordinatedProcess())
	}
	pgtest.Main(m)
}

// The campaign's knobs. THROTTLED_CHAOS=full (make chaos) runs every
// fault, longer; the default is a short seeded run of a few, for make test.
// THROTTLED_CHAOS_SEED picks the order; THROTTLED_CHAOS_DOC, a file to write
// the report to; THROTTLED_CHAOS_FAULTS, a list of faults to run instead.
const (
	// grace is how long after a hold is placed or a critical pause begins
	// a batch may still commit: the hold reaches every process within the
	// second (LISTEN/NOTIFY), and a batch already running finishes within
	// its statement timeout (2 s).
	grace = 4 * time.Second
	// recoverWithin is the stated recovery time: after a fault is undone,
	// every job commits a batch again within it.
	recoverWithin = 45 * time.Second
	// stopWithin: a process told to stop (SIGTERM) exits within it.
	stopWithin = 15 * time.Second
	oldRows    = 40_000 // per table; as many new rows, never to be touched
	jobA, jobB = "chaos-a", "chaos-b"
	jobR       = "chaos-r" // remote workers through the sidecar
)

var chaosJobs = []string{jobA, jobB, jobR}

func table(job string) string { return strings.ReplaceAll(job, "-", "_") }

// ledgerSQL deletes one batch of old rows of job's table and records each
// in the ledger in the same statement (so in the same transaction): the
// ledger holds exactly the rows that were deleted, with when.
func ledgerSQL(job string) string {
	t := table(job)
	return fmt.Sprintf(`WITH d AS (DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE created_at < now() - interval '30 days'
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id) INSERT INTO chaos_ledger (job, id) SELECT '%[2]s', id FROM d`, t, job)
}

// proc is one throttled process of the campaign.
type proc struct {
	name string
	args []string
	env  []string
	cmd  *exec.Cmd
	out  pgtest.Buffer
	done chan struct{}
	code atomic.Int32
	// reported: its exit is in the report already.
	reported bool
}

// lastLine is the last error line of out (else its last line), at most
// 200 bytes.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	l := lines[len(lines)-1]
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "[ERROR]") || strings.HasPrefix(lines[i], "throttled exec:") {
			l = lines[i]
			break
		}
	}
	if len(l) > 300 {
		l = l[:300] + "…"
	}
	return l
}

func (p *proc) start(t *testing.T, bin string) {
	t.Helper()
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done, p.reported = make(chan struct{}), false
	cmd, done := p.cmd, p.done
	go func() {
		_ = cmd.Wait()
		p.code.Store(int32(cmd.ProcessState.ExitCode()))
		close(done)
	}()
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and reports how long the process took to exit, or
// false after stopWithin (it is then killed).
func (p *proc) stop() (time.Duration, bool) {
	if !p.alive() {
		return 0, true
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopWithin)
	defer t.Stop()
	select {
	case <-p.done:
		return time.Since(start), true
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return time.Since(start), false
	}
}

func (p *proc) kill() {
	if p.alive() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// buildBinary builds cmd/throttled once for the campaign.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "throttled")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/throttled/throttled/cmd/throttled").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// viaProxy is dsn with its host replaced by the proxy's address.
func viaProxy(t *testing.T, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// pageLog is every page the campaign saw: the sidecar's webhook
// deliveries, and the page lines of exec processes while one leads (exec
// has no notifier; it logs its pages).
type pageLog struct {
	mu    sync.Mutex
	pages []seenPage
}

type seenPage struct {
	at    time.Time
	cause string
	by    string
}

func (l *pageLog) add(p seenPage) {
	l.mu.Lock()
	l.pages = append(l.pages, p)
	l.mu.Unlock()
}

func (l *pageLog) between(from, to time.Time) []seenPage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []seenPage
	for _, p := range l.pages {
		if !p.at.Before(from) && p.at.Before(to) {
			out = append(out, p)
		}
	}
	return out
}

// fault is one entry of the campaign.
type fault struct {
	name string
	// what: the fault in a few words, for the report.
	what string
	// inject starts the fault and returns its undo.
	inject func(ctx context.Context, r *rig) (undo func(ctx context.Context) error, err error)
	// page: whether the fault should page.
	page bool
	// exitsAs, when set, is the error a worker may exit with under this
	// fault, by design: the campaign restarts it then, as its supervisor
	// would, and reports it.
	exitsAs string
}

// rig is the campaign's running system.
type rig struct {
	t         *testing.T
	c         *pgcluster.Cluster
	bin       string
	admin     *pgxpool.Pool
	proxy     *Proxy
	sidecar   *proc
	workers   []*proc
	pages     *pageLog
	hookURL   string
	cfgPath   string
	sidecarB  string // the sidecar's base URL
	hold      time.Duration
	cancel    func()
	remoteWG  sync.WaitGroup
	remoteOK  atomic.Int64
	remoteErr atomic.Int64
	fg        *replay.Foreground
}

const opsToken, workerToken, hookSecret = "ops-token-0123456789abcdef", "worker-token-0123456789abcdef", "hook-secret-0123456789abcdef"

func (r *rig) sidecarArgs() []string {
	return []string{"run", "--config", r.cfgPath, "--log-level", "warn"}
}

func (r *rig) execArgs(job string) []string {
	primary := viaProxy(r.t, r.c.Primary.DSN(pgcluster.RoleMonitor), r.proxy.Addr())
	jobDSN := viaProxy(r.t, r.c.Primary.DSN(pgcluster.RoleAdmin), r.proxy.Addr())
	return []string{"exec", "--primary-dsn", primary, "--job-dsn", jobDSN, "--cores", "2", "--job", job, "--sql", ledgerSQL(job),
		"--batch-size", "20", "--min-batch-size", "20", "--max-batch-size", "20", "--max-rate", "4", "--initial-rate", "4",
		"--statement-timeout", "2s", "--quiet-period", "3s", "--log-level", "info"}
}

// leaderPID is the pid of the process that leads, from its identity in
// throttled.leader (host:pid:nonce), or 0.
func (r *rig) leaderPID(ctx context.Context) int {
	var who string
	if err := r.admin.QueryRow(ctx, "SELECT leader FROM throttled.leader WHERE id = 1 AND published_at > now() - interval '5 seconds'").Scan(&who); err != nil {
		return 0
	}
	parts := strings.Split(who, ":")
	if len(parts) < 2 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid
}

func (r *rig) procByPID(pid int) *proc {
	for _, p := range append([]*proc{r.sidecar}, r.workers...) {
		if p.cmd != nil && p.cmd.Process != nil && p.cmd.Process.Pid == pid && p.alive() {
			return p
		}
	}
	return nil
}

// progress is each job's last batch time, from the ledger.
func (r *rig) lastBatch(ctx context.Context) map[string]time.Time {
	out := map[string]time.Time{}
	rows, err := r.admin.Query(ctx, "SELECT job, max(at) FROM chaos_ledger GROUP BY job")
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var j string
		var at time.Time
		if rows.Scan(&j, &at) == nil {
			out[j] = at
		}
	}
	return out
}

// underPause counts the batches committed while a hold applied to their
// job, or a critical pause to every job, past the grace, in [from, to).
func (r *rig) underPause(ctx context.Context, from, to time.Time) (int, error) {
	var n int
	err := r.admin.QueryRow(ctx, `
		WITH pauses AS (
			SELECT scope_kind, scope_value, created_at + $3::interval AS s, coalesce(released_at, expires_at) AS e
			FROM throttled.holds WHERE ratio = 0 AND exempt = ''
			UNION ALL
			SELECT 'all', '', c.at + $3::interval, coalesce((SELECT min(r.at) FROM throttled.audit r WHERE r.event = 'mode'
				AND r.detail->>'kind' IN ('recovered', 'resumed') AND r.at > c.at), 'infinity')
			FROM throttled.audit c WHERE c.event = 'mode' AND c.detail->>'kind' IN ('critical', 'latched'))
		SELECT count(*) FROM chaos_ledger l JOIN pauses p ON l.at >= p.s AND l.at < p.e
			AND (p.scope_kind = 'all' OR (p.scope_kind = 'job' AND p.scope_value = l.job) OR (p.scope_kind = 'group' AND l.job LIKE p.scope_value || '%'))
		WHERE l.at >= $1 AND l.at < $2`, from, to, grace.String()).Scan(&n)
	return n, err
}

func TestChaosCampaign(t *testing.T) {
	full := os.Getenv("THROTTLED_CHAOS") == "full"
	seed := uint64(1)
	if s := os.Getenv("THROTTLED_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("THROTTLED_CHAOS_SEED=%q: want a number", s)
		}
		seed = v
	}
	hold, count := 5*time.Second, 4
	if full {
		hold, count = 8*time.Second, len(allFaults())
	}
	c := pgtest.Cluster(t)
	ctx := context.Background()
	r := &rig{t: t, c: c, bin: buildBinary(t), pages: &pageLog{}, hold: hold}
	r.setup(ctx)

	faults := allFaults()
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	faults = faults[:count]
	if only := os.Getenv("THROTTLED_CHAOS_FAULTS"); only != "" {
		// A comma-separated list of faults, in that order: to study one.
		faults = nil
		for _, name := range strings.Split(only, ",") {
			i := slices.IndexFunc(allFaults(), func(f fault) bool { return f.name == name })
			if i < 0 {
				t.Fatalf("THROTTLED_CHAOS_FAULTS: no fault %q", name)
			}
			faults = append(faults, allFaults()[i])
		}
	}

	var rows []reportRow
	for _, f := range faults {
		rows = append(rows, r.runFault(ctx, f))
	}
	final := r.finish(ctx)
	report := renderReport(seed, full, hold, rows, final)
	t.Log("\n" + report)
	if path := os.Getenv("THROTTLED_CHAOS_DOC"); path != "" {
		if err := writeBetween(path, report); err != nil {
			t.Fatal(err)
		}
	}
	for _, row := range rows {
		for _, p := range row.problems {
			t.Errorf("%s: %s", row.fault, p)
		}
	}
	for _, p := range final.problems {
		t.Errorf("at the end: %s", p)
	}
	if t.Failed() || os.Getenv("THROTTLED_CHAOS_LOGS") != "" {
		for _, p := range append([]*proc{r.sidecar}, r.workers...) {
			out := p.out.String()
			t.Logf("%s's output (last 6000 bytes):\n%s", p.name, out[max(0, len(out)-6000):])
		}
	}
}

// setup creates the tables, the proxy, the webhook receiver, the
// sidecar (first, so it leads), four exec workers on two jobs, two remote
// workers through the sidecar, and the foreground.
func (r *rig) setup(ctx context.Context) {
	t := r.t
	var err error
	if r.admin, err = pgxpool.New(ctx, r.c.Primary.DSN(pgcluster.RoleAdmin)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.admin.Close)
	stmts := []string{"DROP TABLE IF EXISTS chaos_ledger",
		"CREATE TABLE chaos_ledger (job text NOT NULL, id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
		"CREATE INDEX ON chaos_ledger (job, at)"}
	for _, j := range chaosJobs {
		tb := table(j)
		stmts = append(stmts, "DROP TABLE IF EXISTS "+tb,
			"CREATE TABLE "+tb+" (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)",
			fmt.Sprintf(`INSERT INTO %s SELECT g, CASE WHEN g %% 2 = 0 THEN now() - interval '60 days' ELSE now() END FROM generate_series(1, %d) g`, tb, 2*oldRows),
			"DELETE FROM throttled.checkpoints WHERE job = '"+j+"'")
	}
	for _, q := range stmts {
		if _, err := r.admin.Exec(ctx, q); err != nil && !strings.Contains(err.Error(), "throttled.checkpoints") {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if r.fg, err = replay.NewForeground(ctx, r.admin, 1, 8); err != nil {
		t.Fatal(err)
	}
	if r.proxy, err = NewProxy("127.0.0.1:" + strconv.Itoa(r.c.Primary.Port)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.proxy.Close() })

	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var a struct {
			Cause  string `json:"cause"`
			Firing bool   `json:"firing"`
		}
		b, _ := io.ReadAll(req.Body)
		if json.Unmarshal(b, &a) == nil && a.Firing {
			r.pages.add(seenPage{at: time.Now(), cause: a.Cause, by: "sidecar webhook"})
		}
	}))
	t.Cleanup(hook.Close)

	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	r.sidecarB = "http://" + addr
	r.cfgPath = filepath.Join(t.TempDir(), "throttled.hcl")
	cfg := fmt.Sprintf(`primary {
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
  secret = env("CHAOS_TOKEN_OPS")
  scopes = ["read", "pause", "admin"]
}
token "worker" {
  secret = env("CHAOS_TOKEN_WORKER")
  scopes = ["work"]
}
controller {
  max_budget   = 30
  quiet_period = "3s"
}
job %q {
  max_rate = 4
}
job %q {
  max_rate = 4
}
job %q {
  max_rate       = 4
  min_batch_size = 20
  max_batch_size = 20
}
notifier "webhook" {
  url    = %q
  secret = env("CHAOS_HOOK_SECRET")
}
`, r.c.Primary.DSN(pgcluster.RoleMonitor), r.c.Primary.DSN(pgcluster.RoleAdmin), pgcluster.ReplicaName, addr, jobA, jobB, jobR, hook.URL)
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sidecar = &proc{name: "sidecar", args: r.sidecarArgs(),
		env: []string{"CHAOS_TOKEN_OPS=" + opsToken, "CHAOS_TOKEN_WORKER=" + workerToken, "CHAOS_HOOK_SECRET=" + hookSecret}}
	r.sidecar.start(t, r.bin)
	t.Cleanup(r.sidecar.kill)
	pgtest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(r.sidecarB + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		if r.leaderPID(ctx) != r.sidecar.cmd.Process.Pid {
			return fmt.Errorf("the sidecar does not lead yet")
		}
		return nil
	})
	for _, j := range []string{jobA, jobA, jobB, jobB} {
		w := &proc{name: "exec " + j, args: r.execArgs(j)}
		w.start(t, r.bin)
		t.Cleanup(w.kill)
		r.workers = append(r.workers, w)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(cancel)
	for range 2 {
		r.remoteWG.Add(1)
		go r.remoteWorker(runCtx)
	}
	go r.foreground(runCtx)
	go r.scanExecPages(runCtx)
	// Every job works before the first fault.
	if _, idle := r.waitAllWork(ctx, time.Now(), recoverWithin); len(idle) > 0 {
		t.Fatalf("before any fault, %v did no work within %s", idle, recoverWithin)
	}
}

// remoteWorker is a worker beside the sidecar: the jobs library paced by
// the sidecar's token API. A failed run (the sidecar gone past the
// client's retries) starts again, as a supervisor would.
func (r *rig) remoteWorker(ctx context.Context) {
	defer r.remoteWG.Done()
	cl, err := remote.New(remote.Config{BaseURL: r.sidecarB, Token: workerToken, MaxAttempts: 4, MaxBackoff: time.Second})
	if err != nil {
		r.remoteErr.Add(1)
		return
	}
	for ctx.Err() == nil {
		j, err := jobs.New(jobs.Config{Name: jobR, InitialBatchSize: 20, MinBatchSize: 20, MaxBatchSize: 20, StatementTimeout: 2 * time.Second},
			r.admin, cl.Pacer(jobR), func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
				tag, err := tx.Exec(ctx, ledgerSQL(jobR), b.Size)
				if err != nil {
					return jobs.Result{}, err
				}
				return jobs.Result{Rows: tag.RowsAffected(), Done: tag.RowsAffected() == 0}, nil
			})
		if err != nil {
			r.remoteErr.Add(1)
			return
		}
		if err := j.Run(ctx); err != nil && ctx.Err() == nil {
			r.remoteErr.Add(1)
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			continue
		}
		r.remoteOK.Add(1)
		return
	}
}

// foreground is the application: the replay benchmark's open-loop
// pgbench-like mix at 50 transactions a second, straight to the primary
// (never through the proxy).
func (r *rig) foreground(ctx context.Context) {
	r.fg.Run(ctx, 50, 1)
}

// scanExecPages records the page lines exec workers log while one of
// them leads.
func (r *rig) scanExecPages(ctx context.Context) {
	seen := map[*proc]int{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, w := range r.workers {
			out := w.out.String()
			if len(out) <= seen[w] {
				continue
			}
			for _, line := range strings.Split(out[seen[w]:], "\n") {
				if strings.Contains(line, " page:") || strings.Contains(line, "[ERROR] page") {
					cause := "page"
					if i := strings.Index(line, "event="); i >= 0 {
						cause = strings.Fields(line[i+len("event="):])[0]
					}
					r.pages.add(seenPage{at: time.Now(), cause: cause, by: w.name + " (log)"})
				}
			}
			seen[w] = len(out)
		}
	}
}

// waitAllWork waits until every job committed a batch after since, and
// returns how long after since the last of them did, or the jobs that did
// not past within.
func (r *rig) waitAllWork(ctx context.Context, since time.Time, within time.Duration) (time.Duration, []string) {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		last := r.lastBatch(ctx)
		var idle []string
		for _, j := range chaosJobs {
			if !last[j].After(since) {
				idle = append(idle, j)
			}
		}
		if len(idle) == 0 {
			return time.Since(since), nil
		}
		if time.Now().After(deadline) {
			return within, idle
		}
		<-tick.C
	}
}

type reportRow struct {
	fault, what string
	injected    time.Duration
	recovery    time.Duration
	recovered   bool
	underPause  int
	crashed     []string
	designed    []string // workers that exited as the fault's design says, restarted
	pagesWant   bool
	pages       []seenPage
	fgOK, fgErr int64
	fgP99       time.Duration // the foreground's p99 so far, over the whole campaign
	// leaderBefore and leader: who led when the fault began, and once it
	// was over.
	leaderBefore, leader string
	problems             []string
}

func (r *rig) runFault(ctx context.Context, f fault) reportRow {
	row := reportRow{fault: f.name, what: f.what, pagesWant: f.page}
	if p := r.procByPID(r.leaderPID(ctx)); p != nil {
		row.leaderBefore = p.name
	}
	fgOK, fgErr, _ := r.fg.Counts()
	start := time.Now()
	undo, err := f.inject(ctx, r)
	if err != nil {
		row.problems = append(row.problems, "inject: "+err.Error())
		return row
	}
	hold := time.NewTimer(r.hold)
	<-hold.C
	undoCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = undo(undoCtx)
	cancel()
	if err != nil {
		row.problems = append(row.problems, "undo: "+err.Error())
	}
	if f.exitsAs != "" {
		for _, w := range r.workers {
			if line := lastLine(w.out.String()); !w.alive() && strings.Contains(line, f.exitsAs) {
				row.designed = append(row.designed, fmt.Sprintf("%s exited %d (%s), restarted", w.name, w.code.Load(), line))
				w.start(r.t, r.bin)
			}
		}
	}
	undone := time.Now()
	row.injected = undone.Sub(start)
	var idle []string
	row.recovery, idle = r.waitAllWork(ctx, undone, recoverWithin)
	row.recovered = len(idle) == 0
	if !row.recovered {
		row.problems = append(row.problems, fmt.Sprintf("%s did no work within %s of the undo", strings.Join(idle, ", "), recoverWithin))
	}
	// Pages land within a few seconds of what causes them.
	settle := time.NewTimer(2 * time.Second)
	<-settle.C
	n, err := r.underPause(ctx, start, time.Now())
	if err != nil {
		row.problems = append(row.problems, "reading holds and the audit: "+err.Error())
	}
	row.underPause = n
	if n > 0 {
		row.problems = append(row.problems, fmt.Sprintf("%d rows committed under a hold or a critical pause", n))
	}
	for _, p := range append([]*proc{r.sidecar}, r.workers...) {
		if !p.alive() && !p.reported {
			p.reported = true
			row.crashed = append(row.crashed, fmt.Sprintf("%s exited %d: %s", p.name, p.code.Load(), lastLine(p.out.String())))
		}
	}
	if len(row.crashed) > 0 {
		row.problems = append(row.problems, "processes gone: "+strings.Join(row.crashed, ", "))
	}
	row.pages = r.pages.between(start, time.Now())
	switch {
	case f.page && len(row.pages) == 0:
		row.problems = append(row.problems, "no page, though it should page")
	case !f.page && len(row.pages) > 0:
		row.problems = append(row.problems, fmt.Sprintf("%d pages, though it should not page", len(row.pages)))
	}
	ok, failed, p99 := r.fg.Counts()
	row.fgOK, row.fgErr, row.fgP99 = ok-fgOK, failed-fgErr, p99
	row.leader = "none"
	if p := r.procByPID(r.leaderPID(ctx)); p != nil {
		row.leader = p.name
	}
	return row
}

type finalRow struct {
	ledger, dups, remainingOld, newRows, wantOld, wantNew int64
	fgOK, fgErr                                           int64
	fgP99                                                 time.Duration
	stops                                                 []string
	problems                                              []string
}

// finish stops every process, checks they exit within stopWithin, and
// checks the rows: every old row deleted is in the ledger exactly once,
// the rest are still there, and no new row was touched.
func (r *rig) finish(ctx context.Context) finalRow {
	var f finalRow
	f.fgOK, f.fgErr, f.fgP99 = r.fg.Counts()
	r.cancel()
	r.remoteWG.Wait()
	for _, p := range append(slices.Clone(r.workers), r.sidecar) {
		d, ok := p.stop()
		f.stops = append(f.stops, fmt.Sprintf("%s %.1fs", p.name, d.Seconds()))
		if !ok {
			f.problems = append(f.problems, fmt.Sprintf("%s did not exit within %s of SIGTERM", p.name, stopWithin))
		}
	}
	for _, j := range chaosJobs {
		var ledger, distinct, old, fresh int64
		if err := r.admin.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM chaos_ledger WHERE job = $1", j).Scan(&ledger, &distinct); err != nil {
			f.problems = append(f.problems, err.Error())
			continue
		}
		if err := r.admin.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE created_at < now() - interval '30 days'), count(*) FILTER (WHERE created_at >= now() - interval '30 days') FROM %s`, table(j))).Scan(&old, &fresh); err != nil {
			f.problems = append(f.problems, err.Error())
			continue
		}
		f.ledger += ledger
		f.dups += ledger - distinct
		f.remainingOld += old
		f.newRows += fresh
		if ledger != distinct {
			f.problems = append(f.problems, fmt.Sprintf("%s: %d rows cleaned twice", j, ledger-distinct))
		}
		if ledger+old != oldRows {
			f.problems = append(f.problems, fmt.Sprintf("%s: %d in the ledger + %d old rows left = %d, want %d", j, ledger, old, ledger+old, oldRows))
		}
		if fresh != oldRows {
			f.problems = append(f.problems, fmt.Sprintf("%s: %d new rows, want %d untouched", j, fresh, oldRows))
		}
		if ledger == 0 {
			f.problems = append(f.problems, j+": cleaned nothing")
		}
	}
	f.wantOld, f.wantNew = int64(len(chaosJobs))*oldRows, int64(len(chaosJobs))*oldRows
	return f
}
