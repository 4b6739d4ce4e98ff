//go:build lab

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// scene is one step of the demo: a fault held for a while.
type scene struct {
	name  string
	hold  time.Duration
	start func(ctx context.Context, c *pgcluster.Cluster) (stop func(), err error)
}

func demoScenes(scale float64) []scene {
	d := func(s float64) time.Duration { return time.Duration(s * scale * float64(time.Second)) }
	return []scene{
		{"idle", d(6), nil},
		{"cpu: 2 busy sessions", d(12), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			s, err := c.CPULoad(ctx, 2, d(60), "")
			if err != nil {
				return nil, err
			}
			return func() { s.Stop() }, nil
		}},
		{"locks: 3 blocked sessions", d(6), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			s, err := c.LockWaits(ctx, 3)
			if err != nil {
				return nil, err
			}
			return func() { s.Stop() }, nil
		}},
		{"replay paused + writes", d(12), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			if err := c.PauseReplay(ctx); err != nil {
				return nil, err
			}
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() {
				t := time.NewTicker(500 * time.Millisecond)
				defer t.Stop()
				for {
					_ = c.WriteWAL(wctx, 256<<10)
					select {
					case <-wctx.Done():
						return
					case <-t.C:
					}
				}
			})
			return func() {
				cancel()
				wg.Wait()
				_ = c.ResumeReplay(context.Background())
			}, nil
		}},
		{"replica stopped", d(8), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			if err := c.StopReplica(ctx); err != nil {
				return nil, err
			}
			return func() { _ = c.StartReplica(context.Background()) }, nil
		}},
		{"vacuum on " + demoTable, d(8), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			return slowVacuum(ctx, c, demoTable)
		}},
		{"held: throttled pause", d(8), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			db, err := openDB(octx, c.Primary.DSN(pgcluster.RoleAdmin), holds.Config{})
			if err != nil {
				return nil, err
			}
			h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob(demoJob), Source: hold.SourceCLI,
				Reason: "demo: checking the replica before the next batch", Actor: "oncall", TTL: 10 * time.Minute})
			if err != nil {
				db.Pool().Close()
				return nil, err
			}
			return func() {
				_, _ = db.Holds().Release(context.Background(), h.ID, "oncall", hold.SourceCLI, "demo: replica checked")
				db.Pool().Close()
			}, nil
		}},
		{"resumed by hand", d(10), nil},
	}
}

// slowVacuum runs a VACUUM of table on the primary, slowed (cost delay
// 100 ms per unit of cost) so that it lasts the scene, and cancels it when
// stopped.
func slowVacuum(ctx context.Context, c *pgcluster.Cluster, table string) (func(), error) {
	conn, err := pgx.Connect(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return nil, err
	}
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	for _, q := range []string{"SET vacuum_cost_delay = 100", "SET vacuum_cost_limit = 1"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(context.Background())
			return nil, err
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = conn.Exec(context.WithoutCancel(ctx), "VACUUM "+pgx.Identifier{table}.Sanitize())
	}()
	return func() {
		if admin, err := pgx.Connect(context.Background(), c.Primary.DSN(pgcluster.RoleAdmin)); err == nil {
			_, _ = admin.Exec(context.Background(), "SELECT pg_cancel_backend($1)", pid)
			admin.Close(context.Background())
		}
		<-done
		conn.Close(context.Background())
	}, nil
}

func newDemoCmd(lf *logFlags) *cobra.Command {
	var scale float64
	var plotDir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "run the signals live against a throwaway primary and replica",
		Long: `Starts a throwaway primary and replica and runs a real cleanup job against them while faults come and
go (about 80 s): load, lock waits, paused replay, a stopped replica, a vacuum on its table and a
person's pause. Logs default to errors only (--log-level): the table shows what the warnings would say.`,
		Example: "  throttled demo\n  throttled demo --scale 0.2 --plots out/plots",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command) int {
			errOut := cmd.ErrOrStderr()
			fs := cmd.Flags()
			// The table shows what the warnings would say; keep the screen
			// clean unless asked.
			if given, err := applyEnv(fs, os.Getenv); err != nil {
				return fail(errOut, "demo", err)
			} else if !given["log-level"] && os.Getenv("THROTTLED_LOG_LEVEL") == "" {
				lf.level = "error"
			}
			if scale <= 0 {
				return fail(errOut, "demo", usageError(fmt.Errorf("--scale must be positive, got %v", scale)))
			}
			log, err := lf.logger(errOut)
			if err != nil {
				return fail(errOut, "demo", err)
			}
			if err := demo(cmd.Context(), log, scale, plotDir, cmd.OutOrStdout()); err != nil {
				return fail(errOut, "demo", err)
			}
			return exitOK
		}),
	}
	cmd.Flags().Float64Var(&scale, "scale", 1, "multiply every scene's length (0.2 for a quick run)")
	cmd.Flags().StringVar(&plotDir, "plots", "", "directory to draw the run's overview (overview-demo.png) in")
	return cmd
}

// Demo job: a cleanup that deletes the old half of a table through the
// jobs library, paced by the controller on the live signals.
const (
	demoJob      = "demo_purge"
	demoTable    = "demo_sessions"
	demoRows     = 300_000
	demoMaxRate  = 5   // batches per second at most
	demoMaxBatch = 500 // rows a batch at most
)

func demo(ctx context.Context, log hclog.Logger, scale float64, plotDir string, out io.Writer) error {
	clog := log.Named("cluster")
	fmt.Fprintln(out, "Starting a throwaway PostgreSQL primary and streaming replica...")
	c, err := pgcluster.Start(ctx, pgcluster.Options{Log: func(f string, a ...any) { clog.Info(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return err
	}
	defer func() {
		c.Stop()
		fmt.Fprintln(out, "Primary and replica stopped and removed.")
	}()
	old, err := demoTableSetup(ctx, c)
	if err != nil {
		return err
	}
	client, err := openDemoClient(ctx, c, log)
	if err != nil {
		return err
	}
	defer client.Close()
	pool, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return err
	}
	defer pool.Close()
	purge, err := jobs.DeleteOlderThan(ctx, pool, demoTable, "created_at", "id", 30*24*time.Hour)
	if err != nil {
		return err
	}
	job, err := client.Job(jobs.Config{Name: demoJob, Tables: []string{demoTable}, Checkpoint: true, InitialBatchSize: 100, MaxBatchSize: demoMaxBatch,
		TargetBatchDuration: 200 * time.Millisecond, Total: old}, pool, purge)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Sampling as %s (pg_monitor, not superuser); %d cores configured.\n", pgcluster.RoleMonitor, demoCores)
	fmt.Fprintf(out, "Job %q deletes the %d rows of %s older than 30 days (of %d), at most %d batches/s of at most %d rows.\n",
		demoJob, old, demoTable, demoRows, demoMaxRate, demoMaxBatch)
	fmt.Fprintf(out, "Rules: primary_load target 0.7, critical 1.0 (3 samples), connection headroom 10%%, replica1 required (lag target 2 s); a vacuum on %s pauses the job (a job rule); quiet period shortened to 8 s for the demo.\n", demoTable)
	fmt.Fprintln(out)

	jctx, stopJob := context.WithCancel(ctx)
	jobDone := make(chan error, 1)
	go func() { jobDone <- job.Run(jctx) }()
	r := &demoRun{out: out, client: client, job: job, scenes: demoScenes(scale), start: time.Now(), timeline: newDemoTimeline(demoJob)}
	r.stats = make([]sceneStats, len(r.scenes))
	// The printer: one row per decision (once a second), for the scene in
	// progress, with the events and reasons as they change.
	decisions := client.Decisions()
	pctx, stopPrinter := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Go(func() { r.print(pctx, decisions) })
	sceneErr := r.play(ctx, c, jobDone)
	stopPrinter()
	pwg.Wait()
	stopJob()
	jobErr := <-jobDone
	if err := r.report(ctx, c, pool, old, plotDir); err != nil {
		return err
	}
	if jobErr != nil && !errors.Is(jobErr, context.Canceled) {
		return jobErr
	}
	return sceneErr
}

// demoCores is the cores the demo tells throttled the primary has.
const demoCores = 2

// openDemoClient opens the demo's client: sampling as the pg_monitor
// role, the replica required, durable holds in the demo database, and a
// vacuum on the table pausing the job.
func openDemoClient(ctx context.Context, c *pgcluster.Cluster, log hclog.Logger) (*throttled.Client, error) {
	return throttled.Open(ctx, throttled.Options{
		PrimaryDSN:  c.Primary.DSN(pgcluster.RoleMonitor),
		ReplicaDSNs: []string{c.Replica.DSN(pgcluster.RoleMonitor)},
		Cores:       demoCores,
		// Durable holds and the audit log, in the demo database itself.
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin),
		Controller: throttle.Config{
			Replicas:      map[string]throttle.ReplicaPolicy{pgcluster.ReplicaName: throttle.ReplicaRequired},
			MaxBudget:     demoMaxRate,
			MinBudget:     0.2, // one batch in 5 s, at the least, while work is allowed
			InitialBudget: 2,
			QuietPeriod:   8 * time.Second,
			// A vacuum on the table the job deletes from pauses it.
			JobRules: map[signals.Name]throttle.Rule{signals.VacuumRunning: {Target: 0}},
			GateHold: 2 * time.Second,
		},
		Logger: log,
	})
}

// demoRun is one run of the demo: the job on its client, the scenes, and
// what the printer gathers of each scene while it plays.
type demoRun struct {
	out      io.Writer
	client   *throttled.Client
	job      *jobs.Job
	scenes   []scene
	start    time.Time
	timeline *demoTimeline

	mu      sync.Mutex
	current int // the scene in progress
	stats   []sceneStats
}

// print writes one row per decision until ctx ends, with the events,
// the reason when it changes, and a gated job's own reason.
func (r *demoRun) print(ctx context.Context, decisions <-chan throttle.Decision) {
	out := r.out
	lastReason, lastJobCode := "", status.Code("")
	fmt.Fprintln(out, demoHeader)
	for {
		var d throttle.Decision
		select {
		case <-ctx.Done():
			return
		case d = <-decisions:
		}
		snap, st := r.client.Snapshot(), r.job.Status()
		r.mu.Lock()
		i := r.current
		r.stats[i].add(snap, d, st)
		r.mu.Unlock()
		r.timeline.add(time.Now(), snap, d, st, r.client.HoldWatcher().Active())
		fmt.Fprintln(out, demoRow(time.Since(r.start), r.scenes[i].name, snap, d, st))
		for _, e := range d.Events {
			tag := "event"
			if e.Page() {
				tag = "PAGE "
			}
			fmt.Fprintf(out, "         %s %s\n", tag, e.Message)
		}
		if d.Reason != lastReason && d.Mode != status.ModeRunning {
			fmt.Fprintf(out, "         why: %s\n", d.Reason)
		}
		lastReason = d.Reason
		// A job held back by what binds it alone (a gate) says so: the
		// cluster's reason does not.
		if jd := d.Jobs[demoJob]; jd.Code != lastJobCode && jd.Code == status.CodeGated {
			fmt.Fprintf(out, "         job: %s\n", jd.Reason)
		}
		lastJobCode = d.Jobs[demoJob].Code
	}
}

// play runs the scenes in order, each for its hold, on cluster c; a job
// that finishes early leaves the scenes going. It returns the first
// scene's failure, or ctx's end.
func (r *demoRun) play(ctx context.Context, c *pgcluster.Cluster, jobDone chan error) error {
	for i, sc := range r.scenes {
		r.mu.Lock()
		r.current = i
		r.stats[i].name = sc.name
		r.mu.Unlock()
		var stop func()
		if sc.start != nil {
			var err error
			if stop, err = sc.start(ctx, c); err != nil {
				return fmt.Errorf("scene %q: %w", sc.name, err)
			}
		}
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(sc.hold):
		case jerr := <-jobDone:
			jobDone <- jerr // the job finished early; keep the scenes going
			<-time.After(sc.hold)
		}
		if stop != nil {
			stop()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// report writes each scene's summary, the overview plot when asked, how
// far the job got, and the audit log.
func (r *demoRun) report(ctx context.Context, c *pgcluster.Cluster, pool *pgxpool.Pool, old int64, plotDir string) error {
	out := r.out
	writeSummary(out, r.stats)
	if plotDir != "" {
		path := filepath.Join(plotDir, "overview-demo.png")
		if err := os.MkdirAll(plotDir, 0o755); err != nil {
			return err
		}
		if err := r.timeline.overview().WritePNG(path); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nThe overview's key series from this run: %s\n", path)
	}
	st := r.job.Status()
	var left int64
	if err := pool.QueryRow(context.WithoutCancel(ctx), "SELECT count(*) FROM "+demoTable+" WHERE created_at < now() - interval '30 days'").Scan(&left); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nJob %s: %s; %d of %d old rows deleted in %d batches (%d retries); %d old rows left, %d recent rows untouched.\n",
		demoJob, st.State, st.Rows, old, st.Batches, st.Retries, left, demoRows-old)
	if st.State == jobs.StateStopped {
		fmt.Fprintln(out, "Stopped between batches at the end of the demo; run again, it would resume from its checkpoint in throttled.checkpoints.")
	}
	fmt.Fprintln(out, "\nThe audit log (throttled audit):")
	if code := run(context.WithoutCancel(ctx), []string{"audit", "--primary-dsn", c.Primary.DSN(pgcluster.RoleAdmin), "--since", "10m"}, out, out); code != exitOK {
		return fmt.Errorf("audit log: exit %d", code)
	}
	return nil
}

// demoTableSetup creates the demo table, every other row older than 30
// days, and returns how many are.
func demoTableSetup(ctx context.Context, c *pgcluster.Cluster) (int64, error) {
	conn, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, payload text);
		INSERT INTO %[1]s SELECT g, CASE WHEN g %% 2 = 0 THEN now() - interval '60 days' ELSE now() - interval '1 day' END, md5(g::text)
		FROM generate_series(1, %[2]d) g`, demoTable, demoRows))
	if err != nil {
		return 0, fmt.Errorf("demo table: %w", err)
	}
	return demoRows / 2, nil
}

const demoHeader = "  time  scene                      load  (raw)  lock  free  replica1 lag        replay   | mode       budget  binding                 | job rows  size"

func demoRow(elapsed time.Duration, scene string, snap signals.Snapshot, d throttle.Decision, st jobs.Status) string {
	cell := func(name signals.Name, replica string, f func(signals.Sample) string) string {
		var labels map[string]string
		if replica != "" {
			labels = map[string]string{signals.LabelReplica: replica}
		}
		s, ok := snap.Get(name, labels)
		switch {
		case !ok:
			return "?"
		case s.Err != nil:
			return shortErr(s.Err)
		case snap.Stale(s):
			return "STALE"
		}
		return f(s)
	}
	load := cell(signals.PrimaryLoad, "", func(s signals.Sample) string { return fmt.Sprintf("%4.2f  %4.2f", s.Value, s.Raw) })
	lock := cell(signals.PrimaryLockWait, "", func(s signals.Sample) string { return fmt.Sprintf("%.0f", s.Raw) })
	free := cell(signals.ConnectionHeadroom, "", func(s signals.Sample) string { return fmt.Sprintf("%.0f", s.Raw) })
	lagB := cell(signals.ReplicaLagBytes, pgcluster.ReplicaName, func(s signals.Sample) string { return formatBytes(s.Raw) })
	lagS := cell(signals.ReplicaLagSeconds, pgcluster.ReplicaName, func(s signals.Sample) string { return fmt.Sprintf("%.1fs", s.Raw) })
	lag := lagB + " / " + lagS
	if lagB == lagS {
		lag = lagB
	}
	paused := cell(signals.ReplicaReplayPaused, pgcluster.ReplicaName, func(s signals.Sample) string {
		if s.Raw == 1 {
			return "paused"
		}
		return "running"
	})
	binding := firstNonEmpty(d.Binding.String(), "-")
	if r := d.Binding.Labels[signals.LabelReplica]; r != "" && d.Binding.Signal == signals.ReplicaLagSeconds {
		binding = r + " lag"
	}
	return fmt.Sprintf("%5.0fs  %-25s  %-11s  %-4s  %-4s  %-18s  %-7s  | %-9s  %6.2f  %-22s  | %-9s %6d  %4d",
		elapsed.Seconds(), scene, load, lock, free, lag, paused, d.Mode, d.Budget, binding, st.State, st.Rows, st.BatchSize)
}

// shortErr is a table cell for a failed sample.
func shortErr(err error) string {
	switch {
	case errors.Is(err, signals.ErrReplicaMissing):
		return "MISSING"
	case errors.Is(err, signals.ErrTimeout):
		return "TIMEOUT"
	case errors.Is(err, signals.ErrUnreachable), errors.Is(err, signals.ErrNotConnected):
		return "DOWN"
	}
	return "ERROR"
}

func formatBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// sceneStats summarises what the signals read during one scene.
type sceneStats struct {
	name                     string
	rows                     int
	maxLoad, maxRaw, maxLock float64
	minFree                  float64
	maxLag                   float64
	modes                    map[status.Mode]int
	rowsFirst, rowsLast      int64
	errors                   map[string]error // signal key -> first error seen
}

func (st *sceneStats) add(snap signals.Snapshot, d throttle.Decision, js jobs.Status) {
	if st.rows == 0 {
		st.minFree = -1
		st.errors = map[string]error{}
		st.modes = map[status.Mode]int{}
		st.rowsFirst = js.Rows
	}
	st.rowsLast = js.Rows
	st.rows++
	st.modes[d.Mode]++
	for _, s := range snap.Samples {
		if s.Err != nil {
			if _, ok := st.errors[s.Key()]; !ok {
				st.errors[s.Key()] = s.Err
			}
			continue
		}
		switch s.Name {
		case signals.PrimaryLoad:
			st.maxLoad, st.maxRaw = max(st.maxLoad, s.Value), max(st.maxRaw, s.Raw)
		case signals.PrimaryLockWait:
			st.maxLock = max(st.maxLock, s.Raw)
		case signals.ConnectionHeadroom:
			if st.minFree < 0 || s.Raw < st.minFree {
				st.minFree = s.Raw
			}
		case signals.ReplicaLagBytes:
			st.maxLag = max(st.maxLag, s.Raw)
		}
	}
}

func writeSummary(w io.Writer, stats []sceneStats) {
	fmt.Fprintln(w, "\nSummary (per scene: the highest load and lag, the lowest headroom, and what could not be read):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENE\tMAX LOAD\tMAX RAW\tMAX LOCK WAIT\tMIN FREE CONNS\tMAX REPLICA LAG\tMODES (seconds)\tJOB ROWS/S\tUNREADABLE")
	var messages []string
	for _, st := range stats {
		if st.rows == 0 {
			continue
		}
		var bad []string
		for _, k := range slices.Sorted(maps.Keys(st.errors)) {
			bad = append(bad, k+" "+shortErr(st.errors[k]))
			messages = append(messages, st.errors[k].Error())
		}
		unreadable := "-"
		if len(bad) > 0 {
			unreadable = strings.Join(bad, ", ")
		}
		var modes []string
		for _, m := range []status.Mode{status.ModeRunning, status.ModeThrottled, status.ModePaused, status.ModeCritical, status.ModeStale} {
			if n := st.modes[m]; n > 0 {
				modes = append(modes, fmt.Sprintf("%s %d", m, n))
			}
		}
		rate := float64(st.rowsLast-st.rowsFirst) / float64(max(1, st.rows-1))
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.0f\t%.0f\t%s\t%s\t%.0f\t%s\n", st.name, st.maxLoad, st.maxRaw, st.maxLock, st.minFree,
			formatBytes(st.maxLag), strings.Join(modes, ", "), rate, unreadable)
	}
	tw.Flush()
	if len(messages) > 0 {
		slices.Sort(messages)
		fmt.Fprintln(w, "\nWhy (each unreadable signal is unsafe, never read as zero):")
		for _, m := range slices.Compact(messages) {
			fmt.Fprintln(w, "  -", m)
		}
	}
}
