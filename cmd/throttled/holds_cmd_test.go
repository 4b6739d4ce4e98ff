package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

// worker is an exec process of the test binary.
type worker struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startWorker(t *testing.T, c *pgcluster.Cluster, job, table string) *worker {
	t.Helper()
	w := &worker{}
	args := execSQLArgs(c, job, fmt.Sprintf(deleteOldShared, table), "--max-rate", "10", "--initial-rate", "10", "--batch-size", "50", "--max-batch-size", "50",
		"--statement-timeout", "2s")
	w.cmd = exec.Command(os.Args[0], args...)
	w.cmd.Env = append(os.Environ(), "THROTTLED_TEST_RUN_MAIN=1")
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.out
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		if t.Failed() {
			t.Logf("worker %s %s output:\n%s", job, table, w.out.String())
		}
	})
	return w
}

// stop sends SIGTERM and returns the exit code.
func (w *worker) stop(t *testing.T) int {
	t.Helper()
	w.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case <-done:
		return w.cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("worker did not stop on SIGTERM:\n%s", w.out.String())
		return -1
	}
}

// jobProgress is a job's checkpoint rows and the database time of its last
// committed batch.
func jobProgress(t *testing.T, admin *pgx.Conn, job string) (int64, time.Time) {
	t.Helper()
	var rows int64
	var at time.Time
	if err := admin.QueryRow(context.Background(), "SELECT rows, updated_at FROM throttled.checkpoints WHERE job = $1", job).Scan(&rows, &at); err != nil {
		return 0, time.Time{}
	}
	return rows, at
}

func rateOver(t *testing.T, admin *pgx.Conn, job string, d time.Duration) float64 {
	t.Helper()
	before, _ := jobProgress(t, admin, job)
	start := time.Now()
	pgtest.Steady(t, d, func() error { return nil })
	after, _ := jobProgress(t, admin, job)
	return float64(after-before) / time.Since(start).Seconds()
}

func cli(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), args, &out, &errOut); code != exitOK {
		t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
	}
	return out.String()
}

func TestPauseStopsEveryWorkerOfTheJobAndOnlyThem(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	oldNew(t, admin, "mp_x", 200_000)
	oldNew(t, admin, "mp_y", 200_000)
	x1, x2 := startWorker(t, c, "mp-x", "mp_x"), startWorker(t, c, "mp-x", "mp_x")
	y := startWorker(t, c, "mp-y", "mp_y")
	// Registered after the workers, so it runs before they are killed.
	t.Cleanup(func() {
		if t.Failed() {
			logConnections(t, admin)
		}
	})
	for _, job := range []string{"mp-x", "mp-y"} {
		pgtest.Eventually(t, 30*time.Second, func() error {
			if r, _ := jobProgress(t, admin, job); r < 500 {
				return fmt.Errorf("%s: %d rows", job, r)
			}
			return nil
		})
	}
	rateBefore := rateOver(t, admin, "mp-x", 2*time.Second)
	dsn := c.Primary.DSN(pgcluster.RoleAdmin)
	out := cli(t, "pause", "--primary-dsn", dsn, "--job", "mp-x", "--ttl", "10m", "--reason", "replica rebuild", "--actor", "alice")
	var pausedAt time.Time
	admin.QueryRow(ctx, "SELECT now()").Scan(&pausedAt)
	if !strings.Contains(out, "on job:mp-x by alice") {
		t.Fatalf("pause output: %s", out)
	}
	// No batch of mp-x commits after the pause plus 1 s plus one batch
	// timeout (2 s); mp-y goes on.
	bound := pausedAt.Add(3 * time.Second)
	yBefore, _ := jobProgress(t, admin, "mp-y")
	pgtest.Steady(t, 5*time.Second, func() error {
		if _, at := jobProgress(t, admin, "mp-x"); at.After(bound) {
			return fmt.Errorf("mp-x committed a batch at %s, %s after the pause", at, at.Sub(pausedAt))
		}
		return nil
	})
	if yAfter, _ := jobProgress(t, admin, "mp-y"); yAfter <= yBefore {
		t.Fatalf("mp-y stopped too (%d -> %d rows)", yBefore, yAfter)
	}
	// A third worker started after the pause does no work.
	frozen, _ := jobProgress(t, admin, "mp-x")
	x3 := startWorker(t, c, "mp-x", "mp_x")
	pgtest.Steady(t, 4*time.Second, func() error {
		if r, _ := jobProgress(t, admin, "mp-x"); r != frozen {
			return fmt.Errorf("mp-x deleted %d rows during the pause (a worker started after it?)", r-frozen)
		}
		return nil
	})
	var holdsList []map[string]any
	if err := json.Unmarshal([]byte(cli(t, "holds", "--primary-dsn", dsn, "--json")), &holdsList); err != nil || len(holdsList) != 1 || holdsList[0]["scope"] != "job:mp-x" {
		t.Fatalf("holds --json: %v, %v", holdsList, err)
	}

	cli(t, "resume", "--primary-dsn", dsn, "--job", "mp-x", "--actor", "bob", "--reason", "rebuilt")
	pgtest.Eventually(t, 10*time.Second, func() error {
		if r, _ := jobProgress(t, admin, "mp-x"); r <= frozen {
			return fmt.Errorf("mp-x has not resumed")
		}
		return nil
	})
	// Slowly: three workers restart at a quarter of their earlier rates.
	if rateAfter := rateOver(t, admin, "mp-x", 2*time.Second); rateAfter > 0.75*rateBefore {
		t.Fatalf("mp-x resumed at %.0f rows/s; before the pause %.0f (want a slow start)", rateAfter, rateBefore)
	}
	for i, w := range []*worker{x1, x2, x3, y} {
		if code := w.stop(t); code != exitInterrupted {
			t.Errorf("worker %d exit %d; want %d:\n%s", i, code, exitInterrupted, w.out.String())
		}
	}
	audit := cli(t, "audit", "--primary-dsn", dsn, "--since", "1h", "--json")
	for _, want := range []string{`"event":"hold_created"`, `"event":"hold_released"`, `"actor":"alice"`, `"actor":"bob"`} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit lacks %s:\n%s", want, audit)
		}
	}
}

func TestPauseCLIValidates(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "--primary-dsn", "postgres://h/db", "--reason", "x"}, "give exactly one of --job, --prefix and --all"},
		{[]string{"pause", "--primary-dsn", "postgres://h/db", "--job", "a", "--all", "--reason", "x"}, "give exactly one"},
		{[]string{"pause", "--primary-dsn", "postgres://h/db", "--job", "a"}, "--reason is required"},
		{[]string{"pause", "--primary-dsn", "postgres://h/db", "--job", "a", "--reason", "x", "--ttl", "-1m"}, "--ttl must be positive"},
		{[]string{"pause", "--primary-dsn", "postgres://h/db", "--job", "Bad", "--reason", "x"}, `invalid scope "job:Bad"`},
		{[]string{"pause", "--primary-dsn", "postgres://h/db", "--job", "a", "--reason", "x", "--max-ttl", "100h"}, "unknown flag --max-ttl"},
		{[]string{"resume", "--primary-dsn", "postgres://h/db"}, "give exactly one of --hold ID, --job, --prefix, --scope and --all"},
		{[]string{"resume", "--primary-dsn", "postgres://h/db", "--hold", "h1", "--all"}, "give exactly one"},
		{[]string{"resume", "--primary-dsn", "postgres://h/db", "--scope", "all", "--all"}, "give exactly one"},
		{[]string{"resume", "--primary-dsn", "postgres://h/db", "--scope", "every"}, `scope "every"`},
		{[]string{"resume", "--primary-dsn", "postgres://h/db", "--all", "--latched"}, "--latched ends the critical pause"},
		{[]string{"resume", "--primary-dsn", "postgres://h/db", "--job", "a", "--reason", "a\x00b"}, "--reason: contains a NUL"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want usage error %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

func TestPauseRefusesATTLOverTheMaximum(t *testing.T) {
	c := pgtest.Cluster(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"pause", "--primary-dsn", c.Primary.DSN(pgcluster.RoleAdmin), "--all", "--reason", "x", "--ttl", "48h"}, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "exceeds the maximum 24h0m0s") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

func TestCheckConfig(t *testing.T) {
	c := pgtest.Cluster(t)
	dir := t.TempDir()
	write := func(name, replica string) string {
		p := dir + "/" + name
		src := fmt.Sprintf("primary {\n  dsn = %q\n  coordination_dsn = %q\n  cores = 2\n}\nreplica %q {\n  policy = \"required\"\n}\nlisten {\n  address = \"127.0.0.1:18087\"\n}\n",
			c.Primary.DSN(pgcluster.RoleMonitor), c.Primary.DSN(pgcluster.RoleAdmin), replica)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, retired := write("good.hcl", "replica1"), write("retired.hcl", "db-retired")
	if out := cli(t, "check-config", "--config", good, "--live"); !strings.Contains(out, "valid (offline, with its secrets, and against the cluster)") {
		t.Fatalf("output: %s", out)
	}
	cli(t, "check-config", "--config", retired) // offline it cannot know
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check-config", "--config", retired, "--live"}, &out, &errOut); code != exitError ||
		!strings.Contains(errOut.String(), `replica "db-retired" does not exist`) {
		t.Fatalf("retired replica: exit %d: %s", code, errOut.String())
	}
	if strings.Contains(errOut.String(), c.Password(pgcluster.RoleMonitor)) {
		t.Fatal("the error shows the DSN's password")
	}
}

// logConnections logs the primary's client backends by application and
// state: what a failing pacing test needs to see.
func logConnections(t *testing.T, admin *pgx.Conn) {
	var max, reserved int
	var leader string
	admin.QueryRow(context.Background(), "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int").Scan(&max, &reserved)
	admin.QueryRow(context.Background(), "SELECT coalesce((SELECT leader || ' budget ' || budget || ' ' || mode || ' ' || binding || ': ' || reason || ' at ' || published_at FROM throttled.leader), 'no leader row')").Scan(&leader)
	t.Logf("max_connections %d, reserved %d; published decision: %s", max, reserved, leader)
	rows, err := admin.Query(context.Background(), `SELECT coalesce(application_name, ''), usename, coalesce(state, ''), count(*)
		FROM pg_stat_activity WHERE backend_type = 'client backend' GROUP BY 1, 2, 3 ORDER BY 4 DESC`)
	if err != nil {
		t.Logf("pg_stat_activity: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var app, user, state string
		var n int
		if err := rows.Scan(&app, &user, &state, &n); err == nil {
			t.Logf("connections: %d %s as %s (%s)", n, app, user, state)
		}
	}
}

// resumeAllSetup makes three holds of three scopes (and none else) and
// returns a DB on the cluster and its admin DSN.
func resumeAllSetup(t *testing.T) (*holds.DB, string, []hold.Hold) {
	t.Helper()
	c := pgtest.Cluster(t)
	ctx := context.Background()
	dsn := c.Primary.DSN(pgcluster.RoleAdmin)
	db, err := openDB(ctx, dsn, holds.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pool := db.Pool()
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "UPDATE throttled.holds SET released_at = now(), released_by = 'test' WHERE released_at IS NULL"); err != nil {
		t.Fatal(err)
	}
	var hs []hold.Hold
	for _, sc := range []hold.Scope{hold.OneJob("purge"), hold.Group("archive_"), hold.AllJobs()} {
		h, err := db.Holds().Add(ctx, hold.Request{Scope: sc, Source: hold.SourceCLI, Reason: "test " + sc.String(), Actor: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return db, dsn, hs
}

func activeIDs(t *testing.T, db *holds.DB) []string {
	t.Helper()
	active, err := db.Holds().Active(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range active {
		ids = append(ids, h.ID)
	}
	return ids
}

// `resume --all` released only the hold scoped to all: with 19 job holds
// active it said "no active hold on all". Now --all releases every active
// hold of every scope after a confirmation that lists them (--yes skips
// it; without a terminal to ask on, --yes is required), and --scope all
// releases the hold on all jobs alone.
func TestResumeAll(t *testing.T) {
	db, dsn, hs := resumeAllSetup(t)
	ctx := context.Background()
	// Each answer is typed on the command's standard input: on a
	// terminal, or on a pipe (no terminal to ask on); none is an empty
	// pipe.
	type answer struct {
		text     string
		terminal bool
	}
	resumeWith := func(a answer, args ...string) (int, string, string) {
		t.Helper()
		typed(t, a.text, a.terminal)
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"resume", "--primary-dsn", dsn, "--actor", "bob", "--reason", "incident over"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	all := fmt.Sprint([]string{hs[0].ID, hs[1].ID, hs[2].ID})

	// Not a terminal, no --yes: refused before anything is read.
	if code, _, errOut := resumeWith(answer{text: "yes\n"}, "--all"); code != exitUsage || !strings.Contains(errOut, "add --yes") {
		t.Fatalf("--all without a terminal or --yes: exit %d: %s", code, errOut)
	}
	// On a terminal, the prompt lists every hold; anything but yes keeps them.
	code, _, errOut := resumeWith(answer{text: "n\n", terminal: true}, "--all")
	if code != exitError || !strings.Contains(errOut, "3 active holds, of every scope") || !strings.Contains(errOut, "Release all 3?") ||
		!strings.Contains(errOut, "not confirmed; nothing released") {
		t.Fatalf("--all answered n: exit %d: %s", code, errOut)
	}
	for _, h := range hs {
		if !strings.Contains(errOut, h.ID) || !strings.Contains(errOut, h.Scope.String()) {
			t.Errorf("the prompt does not list %s on %s:\n%s", h.ID, h.Scope, errOut)
		}
	}
	if got := fmt.Sprint(activeIDs(t, db)); got != all {
		t.Fatalf("after a refused confirmation: %s; want %s", got, all)
	}
	// --scope all is the hold on all jobs alone.
	code, out, errOut := resumeWith(answer{}, "--scope", "all")
	if code != exitOK || !strings.Contains(out, "released hold "+hs[2].ID+" on all") {
		t.Fatalf("--scope all: exit %d: %s%s", code, out, errOut)
	}
	if got := fmt.Sprint(activeIDs(t, db)); got != fmt.Sprint([]string{hs[0].ID, hs[1].ID}) {
		t.Fatalf("after --scope all: %s; want the job and group holds", got)
	}
	if code, _, errOut := resumeWith(answer{}, "--scope", "all"); code != exitError || !strings.Contains(errOut, "no active hold on exactly all") {
		t.Fatalf("--scope all again: exit %d: %s", code, errOut)
	}
	// Confirmed on a terminal: every hold of every scope.
	code, out, errOut = resumeWith(answer{text: "yes\n", terminal: true}, "--all")
	if code != exitOK || !strings.Contains(out, "released hold "+hs[0].ID+" on job:purge") || !strings.Contains(out, "released hold "+hs[1].ID+" on group:archive_") {
		t.Fatalf("--all confirmed: exit %d: %s%s", code, out, errOut)
	}
	if got := activeIDs(t, db); len(got) != 0 {
		t.Fatalf("after --all: %v still active", got)
	}
	if code, out, _ := resumeWith(answer{}, "--all", "--yes"); code != exitOK || !strings.Contains(out, "no active holds") {
		t.Fatalf("--all --yes with nothing held: exit %d: %s", code, out)
	}
	// --yes: no question, even without a terminal.
	_, _, hs = resumeAllSetup(t)
	if code, out, errOut := resumeWith(answer{}, "--all", "--yes"); code != exitOK || strings.Count(out, "released hold") != 3 || strings.Contains(errOut, "Release all") {
		t.Fatalf("--all --yes: exit %d: %s%s", code, out, errOut)
	}
	es, err := db.Audit().Since(ctx, hs[0].Created.Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Event == holds.EventHoldReleased && e.Actor == "bob" && e.Reason == "incident over" && e.Source == string(hold.SourceCLI) &&
			slices.ContainsFunc(hs, func(h hold.Hold) bool { return h.ID == e.HoldID }) {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d releases audited as bob's from the CLI; want 3", n)
	}
}

// The same through a sidecar's API (--addr), as the token.
func TestResumeAllThroughASidecar(t *testing.T) {
	db, dsn, hs := resumeAllSetup(t)
	ctx := context.Background()
	c := pgtest.Cluster(t)
	client, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: dsn, Coordinate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv, err := sidecar.New(client, &config.Config{Version: "v1", MaxConcurrent: 8, HoldTTL: hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour},
		Tokens: []config.Token{{Name: "ops", Secret: opsToken, Scopes: []config.Scope{config.ScopePause, config.ScopeRead}}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hsrv := httptest.NewServer(srv.Handler())
	t.Cleanup(hsrv.Close)
	t.Setenv("THROTTLED_TOKEN", opsToken)
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"resume", "--addr", hsrv.URL, "--scope", "job:purge"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "released hold "+hs[0].ID+" on job:purge") {
		t.Fatalf("--addr --scope job:purge: exit %d: %s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(ctx, []string{"resume", "--addr", hsrv.URL, "--all", "--yes", "--reason", "done"}, &out, &errOut); code != exitOK ||
		strings.Count(out.String(), "released hold") != 2 || !strings.Contains(out.String(), hs[2].ID+" on all") {
		t.Fatalf("--addr --all --yes: exit %d: %s%s", code, out.String(), errOut.String())
	}
	if got := activeIDs(t, db); len(got) != 0 {
		t.Fatalf("after --addr --all: %v still active", got)
	}
}
