package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// exitInterrupted is exec's exit code after SIGINT or SIGTERM: stopped
// between batches, nothing half-applied.
const exitInterrupted = 130

type execOptions struct {
	primaryDSN, jobDSN string
	replicaDSNs        []string
	replicas           []string
	config             string
	cores              float64
	job, sql           string
	batch, minBatch    int
	maxBatch           int
	target, timeout    time.Duration
	startTimeout       time.Duration
	maxRate, initRate  float64
	quiet              time.Duration
	maxAttempts        int
	maxOutage          time.Duration
	dryRun, noCheck    bool
	solo               bool
	allowSuperuser     bool
	foregroundLatency  float64
	noLatency          bool
	tables             []string
	pgbouncerDSN       string
	json               bool
	pauseOnVacuum      bool
	log                logFlags

	// From --config's file (fromConfig), where the flags leave a value
	// out: the file itself, for what run would take from it; the
	// controller's budget (0: --max-rate's); the job's weight, floor and
	// job rules (its block's); and where the cluster's holds and leader
	// are, when the file names a coordination_dsn of its own.
	file            *config.Config
	budget          float64
	weight, minRate float64
	jobSignals      []string
	coordinationDSN string
}

func (o *execOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.primaryDSN, "primary-dsn", "", "primary connection URL for sampling, as a role with pg_monitor")
	withEnv(fs, "primary-dsn", "THROTTLED_PRIMARY_DSN")
	fs.StringVar(&o.jobDSN, "job-dsn", "", "connection URL the statement runs on (default: the primary's)")
	withEnv(fs, "job-dsn", "THROTTLED_JOB_DSN")
	fs.StringArrayVar(&o.replicaDSNs, "replica-dsn", nil, "replica connection URL (repeatable)")
	fs.StringVar(&o.config, "config", "", "a sidecar's configuration file: every block that paces or protects the job (primary, replicas, signal rules, custom and Prometheus signals, PgBouncer, the controller, the job's block and its windows), where the flags leave it out; its API blocks are run's")
	withEnv(fs, "config", "THROTTLED_CONFIG")
	fs.StringArrayVar(&o.replicas, "replica", nil, "replica (slot or application_name) whose lag is required: missing or stale stops the job (repeatable)")
	fs.Float64Var(&o.cores, "cores", 0, "the primary's CPU cores, which load is a share of (required)")
	withEnv(fs, "cores", "THROTTLED_CORES")
	fs.StringVar(&o.job, "job", "", "job name: its sessions carry application_name throttled:<job> (required)")
	fs.StringVar(&o.sql, "sql", "", "the batch statement, with $1 for the batch size; run until it affects no row (required)")
	fs.IntVar(&o.batch, "batch-size", 100, "first batch size")
	fs.IntVar(&o.minBatch, "min-batch-size", 1, "smallest batch size")
	fs.IntVar(&o.maxBatch, "max-batch-size", 10000, "largest batch size")
	fs.DurationVar(&o.target, "target-batch-duration", time.Second, "batch duration the size adapts toward")
	fs.DurationVar(&o.timeout, "statement-timeout", 5*time.Second, "statement_timeout of every batch, 1ms to 1h")
	fs.DurationVar(&o.startTimeout, "timeout", 10*time.Second, "bound on connecting and starting: the first samples, the cluster's holds")
	fs.Float64Var(&o.maxRate, "max-rate", 10, "most batches per second, however healthy the primary")
	fs.Float64Var(&o.initRate, "initial-rate", 0, "batches per second to start at (default a quarter of --max-rate, as after a pause; it doubles from there while every signal is far under target)")
	fs.DurationVar(&o.quiet, "quiet-period", 30*time.Second, "how long load must stay low before a critical pause ends")
	fs.IntVar(&o.maxAttempts, "max-attempts", 5, "tries of one batch before the job fails (a non-retryable error fails it at once)")
	fs.DurationVar(&o.maxOutage, "max-outage", 2*time.Minute, "how long to ride out a database that cannot be reached (a failover, a restart) before failing; it spends no attempts")
	fs.BoolVar(&o.dryRun, "dry-run", false, "EXPLAIN the first batch and change nothing")
	fs.BoolVar(&o.noCheck, "no-checkpoint", false, "do not record progress in throttled.checkpoints")
	fs.BoolVar(&o.solo, "solo", false, "decide in this process alone instead of following the cluster's elected leader")
	fs.BoolVar(&o.allowSuperuser, "allow-superuser", false, "allow sampling as a superuser (not recommended)")
	fs.Float64Var(&o.foregroundLatency, "foreground-latency", 0, fmt.Sprintf("keep a canary commit's latency under this multiple of its job-free baseline, such as 1.5; without it the default, %g, applies where the canary can run ('throttled migrate'), and with it a canary that cannot run stops the start", throttle.DefaultForegroundLatencyRule.Target))
	fs.BoolVar(&o.noLatency, "no-foreground-latency", false, "do not pace on foreground latency (no canary)")
	fs.StringVar(&o.pgbouncerDSN, "pgbouncer-dsn", "", "PgBouncer's admin console (dbname=pgbouncer): connection headroom then counts its pools")
	withEnv(fs, "pgbouncer-dsn", "THROTTLED_PGBOUNCER_DSN")
	fs.BoolVar(&o.json, "json", false, "print progress as one JSON object a second, and a summary object at the end (rows, batches, retries, errors, duration, time paused and why, seconds at each limit)")
	fs.StringArrayVar(&o.tables, "table", nil, "a table the statement writes, as schema.table (repeatable): job rules on vacuum_running bind the job on these")
	fs.BoolVar(&o.pauseOnVacuum, "pause-on-vacuum", false, "pause while a vacuum (autovacuum or manual) runs on a --table, and resume after it")
}

// newExecCmd is `throttled exec`, parsing into o.
func newExecCmd(lf *logFlags, o *execOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "exec --job NAME --sql STATEMENT [flags]",
		Short: "run an ad-hoc batch statement under the throttle until it affects no row",
		Long: `Runs one batch statement (with $1 for the batch size) under the throttle until it affects no row, with
checkpoints, bounded retries and the cluster's holds. It prints progress once a second (one line
rewritten in place on a terminal; with --json one JSON object a second and a summary object last).
SIGINT or SIGTERM stop it between batches: the batch in flight finishes, nothing is half-applied, and
running it again continues from the checkpoint.`,
		Example: `  throttled exec --cores 8 --job purge_sessions --sql "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE expires_at < now() - interval '30 days' LIMIT $1)"
  throttled exec --cores 8 --job purge_sessions --table public.sessions --pause-on-vacuum --json --sql "..."`,
		Args: cobra.NoArgs,
		Annotations: map[string]string{annotationExit: "Exit codes: 0 done, 1 a non-retryable error (with the reason), 2 usage, " +
			"130 interrupted by SIGINT or SIGTERM (between batches, nothing half-applied)."},
		RunE: action(func(cmd *cobra.Command) int {
			if err := o.check(cmd.Flags(), os.Getenv); err != nil {
				return fail(cmd.ErrOrStderr(), "exec", err)
			}
			o.log = *lf
			return runExec(cmd.Context(), *o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	cmd.Flags().SortFlags = false
	o.register(cmd.Flags())
	return cmd
}

// check reads the environment behind the flags not given and validates,
// every problem at once, in flag names.
func (o *execOptions) check(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	if _, err := applyEnv(fs, getenv); err != nil {
		errs = append(errs, err)
	}
	if o.config != "" {
		// A flag given, or its variable set, beats the file.
		if err := o.fromConfig(fs.Changed); err != nil {
			return err
		}
	}
	o.budget = cmp.Or(o.budget, o.maxRate)
	o.jobDSN = firstNonEmpty(o.jobDSN, o.primaryDSN)
	if o.primaryDSN == "" {
		errs = append(errs, errors.New("--primary-dsn (or THROTTLED_PRIMARY_DSN, or --config) is required"))
	}
	if !(o.cores > 0) || o.cores > 1e6 {
		errs = append(errs, fmt.Errorf("--cores must be a positive number of CPU cores, got %v", o.cores))
	}
	if o.job == "" {
		errs = append(errs, errors.New("--job is required"))
	} else if err := status.Job(o.job).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--job: %w", err))
	}
	if o.pauseOnVacuum && len(o.tables) == 0 {
		errs = append(errs, errors.New("--pause-on-vacuum needs --table: the tables whose vacuums pause the job"))
	}
	for i, t := range o.tables {
		o.tables[i] = signals.TableName(t)
	}
	switch {
	case strings.TrimSpace(o.sql) == "":
		errs = append(errs, errors.New("--sql is required"))
	case !strings.Contains(o.sql, "$1"):
		errs = append(errs, errors.New("--sql must use $1 for the batch size (for example ... LIMIT $1)"))
	}
	switch {
	case o.minBatch < 1:
		errs = append(errs, fmt.Errorf("--min-batch-size must be at least 1, got %d", o.minBatch))
	case o.maxBatch < o.minBatch:
		errs = append(errs, fmt.Errorf("--max-batch-size %d must not be below --min-batch-size %d", o.maxBatch, o.minBatch))
	case o.batch < o.minBatch || o.batch > o.maxBatch:
		errs = append(errs, fmt.Errorf("--batch-size %d must lie within --min-batch-size %d and --max-batch-size %d", o.batch, o.minBatch, o.maxBatch))
	}
	if o.target <= 0 {
		errs = append(errs, fmt.Errorf("--target-batch-duration must be positive, got %s", o.target))
	}
	if o.timeout < time.Millisecond || o.timeout > time.Hour {
		errs = append(errs, fmt.Errorf("--statement-timeout must be between 1ms and 1h, got %s", o.timeout))
	}
	if o.startTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, got %s", o.startTimeout))
	}
	if !(o.maxRate > 0) || o.maxRate > 1e6 {
		errs = append(errs, fmt.Errorf("--max-rate must be a positive number of batches per second, got %v", o.maxRate))
	}
	if o.initRate == 0 {
		// A quarter, as work restarts after a pause: from a tenth, the
		// doublings of slow start cost a 25 s cleanup on an idle primary
		// 3 s of its 25.
		o.initRate = min(o.maxRate, o.budget) / 4
	}
	if !(o.initRate > 0) || o.initRate > o.maxRate {
		errs = append(errs, fmt.Errorf("--initial-rate must be positive and at most --max-rate %v, got %v", o.maxRate, o.initRate))
	}
	if o.maxAttempts < 1 {
		errs = append(errs, fmt.Errorf("--max-attempts must be at least 1, got %d", o.maxAttempts))
	}
	if o.maxOutage <= 0 {
		errs = append(errs, fmt.Errorf("--max-outage must be positive, got %s", o.maxOutage))
	}
	if o.quiet <= 0 {
		errs = append(errs, fmt.Errorf("--quiet-period must be positive, got %s", o.quiet))
	}
	if o.foregroundLatency != 0 {
		if err := throttle.CheckForegroundTarget(o.foregroundLatency); err != nil {
			errs = append(errs, fmt.Errorf("--foreground-latency %w", err))
		}
	}
	if o.foregroundLatency != 0 && o.noLatency {
		errs = append(errs, fmt.Errorf("--foreground-latency %v and --no-foreground-latency: one or the other", o.foregroundLatency))
	}
	return usageError(errors.Join(errs...))
}

// execDeferLeadership is how long no leader must have published before
// an exec tries to lead.
const execDeferLeadership = 3 * time.Second

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func runExec(ctx context.Context, o execOptions, out, errOut io.Writer) int {
	log, err := o.log.logger(errOut)
	if err != nil {
		return fail(errOut, "exec", err)
	}
	cfg := o.jobConfig()
	if _, err := jobs.New(cfg, nil, noPacer{}, nil); err != nil {
		return fail(errOut, "exec", usageError(err))
	}
	// The statement's own pool: few connections, every session tagged.
	pcfg, err := pgxpool.ParseConfig(o.jobDSN)
	if err != nil {
		return fail(errOut, "exec", usageError(fmt.Errorf("--job-dsn: %w", err)))
	}
	pcfg.MaxConns = 2
	pcfg.ConnConfig.RuntimeParams["application_name"] = jobs.AppName(o.job)
	pcfg.ConnConfig.ConnectTimeout = min(5*time.Second, o.startTimeout)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fail(errOut, "exec", err)
	}
	defer pool.Close()

	if o.dryRun {
		return execDryRun(ctx, pool, o, out, errOut)
	}
	if err := errors.Join(checkDSN("--primary-dsn", o.primaryDSN), checkDSN("--pgbouncer-dsn", o.pgbouncerDSN)); err != nil {
		return fail(errOut, "exec", usageError(err))
	}
	client, err := openExecClient(ctx, o, log)
	if err != nil {
		return fail(errOut, "exec", err)
	}
	defer client.Close()
	job, err := client.Job(cfg, pool, jobs.Statement(o.sql))
	if err != nil {
		return fail(errOut, "exec", err)
	}

	// Progress once a second: one line each, or one line rewritten in
	// place on a terminal.
	pctx, stopProgress := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var paused pausedTime
	started := time.Now()
	wg.Go(func() { progress(pctx, out, job, o.json, &paused) })
	err = job.Run(ctx)
	stopProgress()
	wg.Wait()
	st := job.Status()
	// Where the time went, from the decisions this process applied to
	// the job: the why of each second.
	limited := client.LimitedSeconds(o.job)
	return reportExec(o, st, err, limited, time.Since(started), paused, out, errOut)
}

// jobConfig is the job exec runs: its flags, and its block of --config's
// file where they leave a value out.
func (o execOptions) jobConfig() jobs.Config {
	sigs := o.jobSignals
	if o.pauseOnVacuum && sigs != nil && !slices.Contains(sigs, string(signals.VacuumRunning)) {
		sigs = append(slices.Clone(sigs), string(signals.VacuumRunning))
	}
	return jobs.Config{
		Name: o.job, InitialBatchSize: o.batch, MinBatchSize: o.minBatch, MaxBatchSize: o.maxBatch,
		TargetBatchDuration: o.target, StatementTimeout: o.timeout, Checkpoint: !o.noCheck,
		Weight: o.weight, MinRate: o.minRate, MaxRate: o.maxRate, Tables: o.tables, Signals: sigs,
		MaxAttempts: o.maxAttempts, MaxOutage: o.maxOutage,
	}
}

// openExecClient opens the client an exec paces its statement with (see
// openOptions). The file's windows, once the client reads the cluster's,
// hold the job once each.
func openExecClient(ctx context.Context, o execOptions, log hclog.Logger) (*throttled.Client, error) {
	windows := o.windows()
	openCtx, cancel := context.WithTimeout(ctx, o.startTimeout)
	defer cancel()
	client, err := throttled.Open(openCtx, o.openOptions(windows, log))
	if err != nil {
		return nil, err
	}
	if windows != nil {
		windows.cluster.Store(client.HoldWatcher())
	}
	return client, nil
}

// openOptions is what an exec opens its client with: what run takes from
// --config's file (clientOptions), under exec's flags, which win where
// both say something; durable holds and the leader beside the job's data
// (or in the file's coordination_dsn); leadership deferred to a sidecar.
// windows, when not nil, are the file's run and maintenance windows.
func (o execOptions) openOptions(windows *fileWindows, log hclog.Logger) throttled.Options {
	var opts throttled.Options
	if o.file != nil {
		opts = clientOptions(o.file, log)
	}
	opts.PrimaryDSN, opts.ReplicaDSNs, opts.Cores = o.primaryDSN, o.replicaDSNs, o.cores
	ctl := &opts.Controller
	// A --replica is required, whatever the file's policy for it.
	ctl.Replicas = cloneOr(ctl.Replicas)
	for _, r := range o.replicas {
		ctl.Replicas[r] = throttle.ReplicaRequired
	}
	opts.Signals.Replicas = nil
	for _, name := range slices.Sorted(maps.Keys(ctl.Replicas)) {
		if ctl.Replicas[name] != throttle.ReplicaIgnored {
			opts.Signals.Replicas = append(opts.Signals.Replicas, name)
		}
	}
	ctl.Rules, ctl.JobRules = cloneOr(ctl.Rules), cloneOr(ctl.JobRules)
	if o.foregroundLatency > 0 {
		// Required: until the canary has learnt its baseline, or while it
		// cannot commit, the job does not run. Without the flag (or a
		// rule in the file) Open adds the default rule where the canary
		// can run.
		ctl.Rules[signals.ForegroundLatency] = throttle.Rule{Target: o.foregroundLatency, Required: true}
	}
	if o.noLatency {
		delete(ctl.Rules, signals.ForegroundLatency)
	}
	if o.pauseOnVacuum {
		r := ctl.JobRules[signals.VacuumRunning]
		r.Target = 0
		ctl.JobRules[signals.VacuumRunning] = r
	}
	// throttled.Open sets primary_load's Resolution from the cores.
	ctl.MaxBudget, ctl.InitialBudget, ctl.QuietPeriod = o.budget, min(o.initRate, o.budget), o.quiet
	ctl.Holds = nil
	if windows != nil {
		ctl.Holds = windows
	}
	opts.NoForegroundLatency = o.noLatency
	opts.Signals.AllowSuperuser, opts.Signals.PgBouncerDSN = o.allowSuperuser, o.pgbouncerDSN
	// Durable holds live beside the job's data, or where the file says
	// the cluster's are: `throttled pause` stops this run within the
	// second.
	opts.CoordinationDSN = firstNonEmpty(o.coordinationDSN, o.jobDSN)
	opts.Coordinate = !o.solo
	// exec has no notifier: a sidecar, which pages, leads whenever one
	// runs; an exec takes over only once no leader has published for
	// three seconds. Hold lifetimes and enforcement are the sidecar's.
	opts.DeferLeadership = execDeferLeadership
	opts.Holds, opts.Enforce = holds.Config{}, nil
	opts.Logger = log
	return opts
}

// windows are the run and maintenance windows of --config's file, or
// nil for none.
func (o execOptions) windows() *fileWindows {
	if o.file == nil || len(o.file.Windows) == 0 {
		return nil
	}
	return &fileWindows{ws: o.file.Windows}
}

// cloneOr is a copy of m, never nil.
func cloneOr[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return maps.Clone(m)
}

// fileWindows are the run and maintenance windows of --config's file, as
// holds: a throttle.HoldSource beside the cluster's. A window the
// cluster's watcher applies too (a sidecar wrote the same file's to
// throttled.windows) is one hold, not two.
type fileWindows struct {
	ws      hold.Windows
	cluster atomic.Pointer[holds.Watcher]
}

// Applying reports the holds the file's windows make on job at now, but
// for those the cluster's windows make too.
func (w *fileWindows) Applying(now time.Time, job string) []hold.Hold {
	hs := w.ws.Applying(now, job)
	cluster := w.cluster.Load()
	if cluster == nil || len(hs) == 0 {
		return hs
	}
	theirs := cluster.Windows().Applying(now, job)
	return slices.DeleteFunc(hs, func(h hold.Hold) bool {
		return slices.ContainsFunc(theirs, func(x hold.Hold) bool { return x.ID == h.ID })
	})
}

// reportExec prints how the run ended (done, interrupted between batches
// or failed), its totals and where its time went, and returns the exit
// code: one JSON summary with --json, else a line.
func reportExec(o execOptions, st jobs.Status, err error, limited map[status.Why]float64, took time.Duration, paused pausedTime, out, errOut io.Writer) int {
	whySlow := status.WhySlow(limited)
	result, code := "done", exitOK
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled):
		result, code = "interrupted", exitInterrupted
	default:
		result, code = "failed", exitError
	}
	if o.json {
		sum := execSummary{Summary: true, Result: result, Rows: st.Rows, Batches: st.Batches, Retries: st.Retries, Errors: st.Errors,
			DurationS: took.Seconds(), PausedS: paused.seconds, PausedWhy: append([]string{}, paused.why...),
			LimitedS: limitedJSON(limited), WhySlow: whySlow}
		if err != nil && code == exitError {
			sum.Error = err.Error()
		}
		_ = json.NewEncoder(out).Encode(sum)
		if result == "failed" {
			return fail(errOut, "exec", err) // and on standard error, for a person
		}
		return code
	}
	summary := fmt.Sprintf("%d rows in %d batches (%d retries, %d errors); %s", st.Rows, st.Batches, st.Retries, st.Errors, whySlow)
	switch result {
	case "done":
		fmt.Fprintf(out, "done: %s\n", summary)
		return exitOK
	case "interrupted":
		fmt.Fprintf(out, "interrupted between batches, nothing half-applied: %s\n", summary)
		return exitInterrupted
	}
	fmt.Fprintf(out, "failed after %s\n", summary)
	return fail(errOut, "exec", err)
}

// execProgress is one line of exec --json's progress.
type execProgress struct {
	At         time.Time `json:"at"`
	Rows       int64     `json:"rows"`
	RowsPerSec int64     `json:"rows_per_second"`
	Batches    int64     `json:"batches"`
	BatchSize  int       `json:"batch_size"`
	Rate       float64   `json:"rate"`
	State      string    `json:"state"`
	Binding    string    `json:"binding,omitempty"`
	Reason     string    `json:"reason,omitempty"`
}

// execSummary is exec --json's last line.
type execSummary struct {
	Summary   bool     `json:"summary"`
	Result    string   `json:"result"` // done, interrupted or failed
	Rows      int64    `json:"rows"`
	Batches   int64    `json:"batches"`
	Retries   int64    `json:"retries"`
	Errors    int64    `json:"errors"`
	DurationS float64  `json:"duration_seconds"`
	PausedS   float64  `json:"paused_seconds"`
	PausedWhy []string `json:"paused_why"`
	// LimitedS is the seconds the job spent at each why (full_rate,
	// growth, a signal's name, slow_start, hold:<source>, ...), as
	// throttled_jobs_limited_seconds_total counts them; WhySlow sums them
	// up in a line ("ran 4m10s: 12 % at full rate, 81 % limited by
	// foreground_latency, 7 % slow start").
	LimitedS map[string]float64 `json:"limited_seconds"`
	WhySlow  string             `json:"why_slow"`
	Error    string             `json:"error,omitempty"`
}

// limitedJSON is seconds per why for JSON: to the millisecond, never null.
func limitedJSON(secs map[status.Why]float64) map[string]float64 {
	out := map[string]float64{}
	for w, s := range secs {
		out[string(w)] = math.Round(s*1000) / 1000
	}
	return out
}

// pausedTime is how long the job was seen paused, sampled once a second
// by progress, and the distinct reasons (the first 10).
type pausedTime struct {
	seconds float64
	why     []string
}

func (p *pausedTime) add(reason string) {
	p.seconds++
	if !slices.Contains(p.why, reason) && len(p.why) < 10 {
		p.why = append(p.why, reason)
	}
}

// noPacer lets jobs.New validate a Config before anything connects.
type noPacer struct{}

func (noPacer) Wait(context.Context) (func(int64, time.Duration, error), error) {
	return nil, errors.New("no pacer")
}

func progress(ctx context.Context, out io.Writer, job *jobs.Job, asJSON bool, paused *pausedTime) {
	f, isFile := out.(*os.File)
	tty := isFile && isTerminal(f) && !asJSON
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastRows int64
	for {
		select {
		case <-ctx.Done():
			if tty {
				fmt.Fprintln(out)
			}
			return
		case <-t.C:
		}
		st := job.Status()
		if st.State == jobs.StatePaused {
			paused.add(st.Reason)
		}
		if asJSON {
			_ = json.NewEncoder(out).Encode(execProgress{At: time.Now().UTC(), Rows: st.Rows, RowsPerSec: st.Rows - lastRows, Batches: st.Batches,
				BatchSize: st.BatchSize, Rate: st.Rate, State: string(st.State), Binding: st.Binding.String(), Reason: st.Reason})
			lastRows = st.Rows
			continue
		}
		line := fmt.Sprintf("%s  rows %d (+%d/s)  batches %d  size %d  rate %.3g/s  %s  binding %s",
			time.Now().Format("15:04:05"), st.Rows, st.Rows-lastRows, st.Batches, st.BatchSize, st.Rate, st.State, firstNonEmpty(st.Binding.String(), "-"))
		if st.State != jobs.StateRunning && st.Reason != "" {
			line += "  (" + st.Reason + ")"
		}
		lastRows = st.Rows
		if tty {
			fmt.Fprintf(out, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(out, line)
		}
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// execDryRun explains the first batch inside a transaction it rolls back.
func execDryRun(ctx context.Context, pool *pgxpool.Pool, o execOptions, out, errOut io.Writer) int {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fail(errOut, "exec", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", fmt.Sprint(o.timeout.Milliseconds())); err != nil {
		return fail(errOut, "exec", err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+o.sql, o.batch)
	if err != nil {
		return fail(errOut, "exec", fmt.Errorf("explain: %w", err))
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fail(errOut, "exec", fmt.Errorf("explain: %w", err))
	}
	fmt.Fprintf(out, "dry run: the first batch ($1 = %d) would run:\n", o.batch)
	for _, l := range plan {
		fmt.Fprintln(out, "  "+l)
	}
	fmt.Fprintln(out, "nothing was changed")
	return exitOK
}

// migrateOptions are the flags of `throttled migrate`.
type migrateOptions struct {
	dsn     string
	timeout time.Duration
	json    bool
}

func newMigrateCmd(lf *logFlags) *cobra.Command {
	var o migrateOptions
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "create or update throttled's tables (schema throttled)",
		Long: `Creates or updates throttled's tables (schema throttled), under an advisory lock; run it once per
database, as a role that may create the schema. Running it again changes nothing.`,
		Example: "  throttled migrate --primary-dsn postgres://admin@db/app\n  THROTTLED_PRIMARY_DSN=postgres://admin@db/app throttled migrate --json",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command) int {
			if _, err := applyEnv(cmd.Flags(), os.Getenv); err != nil {
				return fail(cmd.ErrOrStderr(), "migrate", err)
			}
			return runMigrate(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.dsn, "primary-dsn", "", "connection URL of the database to migrate (--dsn is the same flag)")
	withEnv(fs, "primary-dsn", "THROTTLED_PRIMARY_DSN")
	// --primary-dsn, as every other command says; --dsn, as migrate first
	// did, is the same flag under its old name.
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "dsn" {
			name = "primary-dsn"
		}
		return pflag.NormalizedName(name)
	})
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "bound on connecting and migrating, waiting for the lock included")
	fs.BoolVar(&o.json, "json", false, "print the schema's state as one JSON object: the migrations applied now, and the schema's version")
	return cmd
}

// migrateResult is `throttled migrate --json`'s answer.
type migrateResult struct {
	Schema  string   `json:"schema"`
	Version int      `json:"version"` // the newest migration, now applied
	Applied []string `json:"applied"` // by this run, oldest first
}

func runMigrate(ctx context.Context, o migrateOptions, out, errOut io.Writer) int {
	if o.dsn == "" {
		return fail(errOut, "migrate", usageError(errors.New("--primary-dsn (or THROTTLED_PRIMARY_DSN) is required")))
	}
	if o.timeout <= 0 {
		return fail(errOut, "migrate", usageError(fmt.Errorf("--timeout must be positive, got %s", o.timeout)))
	}
	if err := checkDSN("--primary-dsn", o.dsn); err != nil {
		return fail(errOut, "migrate", usageError(err))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		return fail(errOut, "migrate", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		return fail(errOut, "migrate", err)
	}
	if o.json {
		all := schema.Migrations()
		res := migrateResult{Schema: schema.Name, Applied: []string{}}
		if len(all) > 0 {
			res.Version = all[len(all)-1].Version
		}
		for _, m := range applied {
			res.Applied = append(res.Applied, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
		_ = json.NewEncoder(out).Encode(res)
		return exitOK
	}
	if len(applied) == 0 {
		fmt.Fprintf(out, "schema %s is up to date (%d migrations)\n", schema.Name, len(schema.Migrations()))
		return exitOK
	}
	for _, m := range applied {
		fmt.Fprintf(out, "applied %04d_%s\n", m.Version, m.Name)
	}
	return exitOK
}
