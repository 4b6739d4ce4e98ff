package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"golang.org/x/time/rate"
)

// Policies, in run order: "fixed" runs after "unthrottled" because its
// default rates are fractions of what unthrottled did.
const (
	PolicyForeground  = "foreground"
	PolicyUnthrottled = "unthrottled"
	PolicyFixed       = "fixed"
	PolicyLagOnly     = "lag-only"
	PolicyBinary      = "binary"
	// PolicyAdaptive is throttled's controller with its defaults, as
	// throttled.Open and `throttled exec` run it on a migrated primary:
	// primary load, connection headroom, replica lag and, since the
	// canary can run, foreground latency.
	PolicyAdaptive = "adaptive"
	// PolicyAdaptiveLoad is the controller without the foreground
	// latency (Options.NoForegroundLatency): load, headroom and lag
	// alone, the defaults where the canary cannot run.
	PolicyAdaptiveLoad = "adaptive-load"
	// PolicyForegroundAgain is foreground alone once more, after every
	// other run: how far p99 moves between two runs of the same thing,
	// the noise any ratio to foreground alone carries.
	PolicyForegroundAgain = "foreground-again"
)

// PolicyNames lists the policies in run order.
var PolicyNames = []string{PolicyForeground, PolicyUnthrottled, PolicyFixed, PolicyLagOnly, PolicyBinary, PolicyAdaptive, PolicyAdaptiveLoad, PolicyForegroundAgain}

// fixedFractions are the default fixed rates, as fractions of the
// unthrottled run's batches per second in the same scenario. The sweep
// reaches down to 2.5 %: on a small machine any write stretches the
// foreground's p99, and the hindsight oracle (the best rate within +10 %)
// sits far below what unthrottled does; half of it never qualified.
var fixedFractions = []float64{0.025, 0.05, 0.1, 0.25}

// Config configures [Run]. The zero value of every field but Cluster
// means its default.
type Config struct {
	// Cluster is the primary and replica to run on. Required. Run creates
	// its tables on the primary and drops them at the end.
	Cluster *pgcluster.Cluster
	// Cores is the primary's CPU cores, for primary_load. Defaults to
	// runtime.NumCPU(): the pair runs on this machine.
	Cores int
	// Scenarios and Policies name what to run (ScenarioNames,
	// PolicyNames). Default all.
	Scenarios, Policies []string
	// RunLength is one run's length. Defaults to 35s.
	RunLength time.Duration
	// Repeat is how many times every scenario's runs are repeated, odd
	// repetitions in the reverse order so that a slow drift of the
	// machine weighs on every policy alike. The tables give each
	// policy's median over them and the spread of its p99: one run's p99
	// strays from the next one's by more than the +10 % goal. Defaults
	// to 3.
	Repeat int
	// Warmup is how long the foreground runs alone before each run's
	// measured window, with the policy's sampler already up. Defaults to
	// 5s.
	Warmup time.Duration
	// Rate is the foreground arrival rate, transactions per second. 0
	// calibrates it on this machine (see Calibrate).
	Rate float64
	// CalibrateTarget is the mean raw primary_load the calibration aims
	// the foreground alone at. Defaults to 0.5.
	CalibrateTarget float64
	// CalibrateStep is how long each calibration step runs. Defaults to
	// 4s.
	CalibrateStep time.Duration
	// Rows is the cleaned table's size, half of it old. Defaults to
	// 24,000,000: on this 2-core machine unthrottled cleaned all 6,000,000
	// old rows of a 12,000,000-row table within a 35 s run (171,000 rows/s
	// beside a light foreground); no policy should run out.
	Rows int64
	// BatchTarget is the cleanup job's TargetBatchDuration under every
	// policy. Defaults to 250ms.
	BatchTarget time.Duration
	// MaxBatch is the cleanup job's MaxBatchSize (keys per batch; about
	// half are old rows) under every policy. Defaults to 5000.
	MaxBatch int
	// Scale is the foreground's pgbench scale (branches; 100,000 accounts
	// each). Defaults to Cores.
	Scale int
	// ReadOnly is the share of read-only foreground transactions.
	// Defaults to 0.5.
	ReadOnly float64
	// Workers is the foreground's connections. Defaults to 4 per core,
	// between 8 and 24.
	Workers int
	// FixedRates are the fixed policy's rates, batches per second.
	// Default: 2.5 %, 5 %, 10 % and 25 % of the unthrottled run's batches per
	// second in the same scenario (1, 2 and 4 when unthrottled is not
	// run).
	FixedRates []float64
	// ForegroundTarget, when not 0, is adaptive's foreground_latency
	// target (a multiple of the job-free baseline, above 1) in place of
	// the product's default (throttle.DefaultForegroundLatencyRule), for
	// choosing a target on one's own database. adaptive-load never uses
	// the canary.
	ForegroundTarget float64
	// HeldBaseline runs adaptive with the canary's baseline measured only
	// while the jobs are held (signals.Config.ForegroundLatencyHeldBaseline).
	HeldBaseline bool
	// Seed seeds the arrivals. Defaults to 1.
	Seed uint64
	// MaxSteal is the largest share of the CPU time the machine's
	// processes wanted during a run's window that the hypervisor may give
	// to other guests (steal) before the run is discarded and run again.
	// Defaults to DefaultMaxSteal; negative keeps every run.
	MaxSteal float64
	// Reruns bounds how many times one run is run again for steal; the
	// last is kept, marked Disturbed. Defaults to DefaultReruns; negative
	// means none.
	Reruns int
	// OutDir, when set, receives one PNG per run.
	OutDir string
	// Log, when set, receives one line per step.
	Log func(format string, args ...any)
}

func (c *Config) fill() {
	c.Cores = cmp.Or(c.Cores, runtime.NumCPU())
	if len(c.Scenarios) == 0 {
		c.Scenarios = ScenarioNames()
	}
	if len(c.Policies) == 0 {
		c.Policies = PolicyNames
	}
	c.RunLength = cmp.Or(c.RunLength, 35*time.Second)
	c.Warmup = cmp.Or(c.Warmup, 5*time.Second)
	c.Repeat = cmp.Or(c.Repeat, 3)
	c.CalibrateTarget = cmp.Or(c.CalibrateTarget, 0.5)
	c.CalibrateStep = cmp.Or(c.CalibrateStep, 4*time.Second)
	c.Rows = cmp.Or(c.Rows, 24_000_000)
	c.Scale = cmp.Or(c.Scale, c.Cores)
	c.ReadOnly = cmp.Or(c.ReadOnly, 0.5)
	c.Workers = cmp.Or(c.Workers, min(24, max(8, 4*c.Cores)))
	c.Seed = cmp.Or(c.Seed, 1)
	c.MaxSteal = cmp.Or(c.MaxSteal, DefaultMaxSteal)
	c.Reruns = cmp.Or(c.Reruns, DefaultReruns)
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("replay: "+format, args...)) }
	if c.Cluster == nil {
		bad("Cluster is required")
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(ScenarioNames(), s) {
			bad("Scenarios: unknown scenario %q; want one of %s", s, strings.Join(ScenarioNames(), ", "))
		}
	}
	for _, p := range c.Policies {
		if !slices.Contains(PolicyNames, p) {
			bad("Policies: unknown policy %q; want one of %s", p, strings.Join(PolicyNames, ", "))
		}
	}
	if c.ForegroundTarget != 0 {
		if err := throttle.CheckForegroundTarget(c.ForegroundTarget); err != nil {
			bad("ForegroundTarget %v", err)
		}
	}
	if c.Repeat < 1 {
		bad("Repeat must be at least 1, got %d", c.Repeat)
	}
	if c.Warmup < 0 {
		bad("Warmup must not be negative, got %s", c.Warmup)
	}
	if c.RunLength < 5*time.Second {
		bad("RunLength must be at least 5s, got %s", c.RunLength)
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		bad("Rate must be a positive number of transactions per second, or 0 to calibrate; got %v", c.Rate)
	}
	if c.ReadOnly < 0 || c.ReadOnly > 1 {
		bad("ReadOnly must be within 0 and 1, got %v", c.ReadOnly)
	}
	if c.Rows < 1000 {
		bad("Rows must be at least 1000, got %d", c.Rows)
	}
	for _, r := range c.FixedRates {
		if r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			bad("FixedRates: each rate must be positive, got %v", r)
		}
	}
	return errors.Join(errs...)
}

// Report is everything one invocation measured.
type Report struct {
	// Command is the command that ran the replay; Rendered, when set, the
	// one that rendered its tables again from its results.json (Load).
	Command  string
	Rendered string `json:",omitempty"`
	// StalePlots are the rows, "scenario policy", whose PNG shows a run
	// the row no longer counts: rendered again, its medians left out the
	// run plotted.
	StalePlots []string `json:",omitempty"`
	Cores      int
	PostgreSQL string
	RunLength  time.Duration
	Warmup     time.Duration
	Repeat     int
	// ForegroundTarget is adaptive's foreground_latency target;
	// HeldBaseline, whether its canary measured the baseline with the
	// jobs held.
	ForegroundTarget float64
	HeldBaseline     bool `json:",omitempty"`
	Rate             float64
	Calibration      *Calibration `json:",omitempty"`
	Scenarios        []Scenario   `json:"-"`
	// Results are every run kept, in the order they ran; Summaries each
	// policy's medians over the repetitions, the tables' rows.
	Results   []Result
	Summaries []Summary
	// MaxSteal is the steal share over which a run was run again, at
	// most Reruns times; Discarded are the runs it discarded, in the
	// order they ran.
	MaxSteal  float64
	Reruns    int
	Discarded []Result `json:",omitempty"`
}

// Result is one run: one scenario under one policy.
type Result struct {
	Scenario, Policy string
	// Rep is the repetition, from 1.
	Rep int
	// FixedRate is the fixed policy's rate, batches per second.
	FixedRate float64 `json:",omitempty"`
	// Foreground: transactions scheduled in the run that completed, per
	// second of run; those that failed or could not start; latency from
	// the scheduled start.
	TPS             float64
	Completed       int64
	Failed          int64
	P50, P99, P999  time.Duration
	P99VsForeground float64 // P99 over the median of the foreground-alone runs'; 0 without one
	// Independent sampler: seconds the smoothed primary_load spent over
	// its target and critical levels, the samples taken and unreadable,
	// the largest replica lag (seconds).
	AboveTarget, AboveCritical float64
	Samples, Unreadable        int
	MaxLag                     float64
	// Job: rows cleaned, per second, batches, retries.
	Rows       int64
	RowsPerSec float64
	Batches    int64
	Retries    int64
	// Finished says the job cleaned every old row before the run ended:
	// the table was too small for the run, and rows/s understates it.
	Finished bool
	// Plot is the run's PNG, when drawn: the run nearest its policy's
	// median p99.
	Plot string `json:",omitempty"`
	// Errors the events met, if any.
	EventErrors string `json:",omitempty"`
	// Steal is the share of the CPU time the machine's processes wanted
	// in the run's window that the hypervisor gave to other guests; -1
	// where /proc/stat cannot be read. Disturbed marks a run kept with a
	// steal over Config.MaxSteal because its re-runs were used up.
	Steal     float64
	Disturbed bool `json:",omitempty"`
	// WorstSecond is the second of the run, from its start, whose
	// transactions had the largest p99, and WorstSecondP99 that p99: it
	// places a stall that the run's p99 only shows happened. -1 without
	// a completed transaction.
	WorstSecond    int
	WorstSecondP99 time.Duration
	// WorstSecondSteal is the steal share in that second, -1 where it
	// was not read: a short burst of steal that Steal, over the whole
	// window, reads as a few percent.
	WorstSecondSteal float64

	series series
	upTo   int64 // the largest key the job's windows reached
}

// Run runs every scenario under every policy, each from the same table
// state, and returns the results.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.Cluster
	adminCfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return nil, err
	}
	adminCfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(ctx, adminCfg)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	rep := &Report{Cores: cfg.Cores, RunLength: cfg.RunLength, Warmup: cfg.Warmup, Repeat: cfg.Repeat,
		ForegroundTarget: cmp.Or(cfg.ForegroundTarget, throttle.DefaultForegroundLatencyRule.Target), HeldBaseline: cfg.HeldBaseline, MaxSteal: cfg.MaxSteal, Reruns: cfg.Reruns}
	if rep.PostgreSQL, err = serverVersion(ctx, admin); err != nil {
		return nil, err
	}
	cfg.Log("creating tables: pgbench scale %d, %s with %d rows (half old)", cfg.Scale, EventsTable, cfg.Rows)
	t0 := time.Now()
	if err := setupTables(ctx, admin, cfg.Scale, cfg.Rows); err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = dropTables(dctx, admin)
	}()
	// The canary's table, as `throttled migrate` makes it.
	if _, err := schema.Migrate(ctx, admin); err != nil {
		return nil, fmt.Errorf("replay: migrate: %w", err)
	}
	// The load wrote gigabytes of WAL that the replica replays for a
	// minute or more, and dirty pages the kernel writes back later:
	// calibration measured the host busy with both, and read knees that
	// fell from ramp to ramp.
	if err := settle(ctx, c, admin, 15*time.Minute); err != nil {
		return nil, err
	}
	cfg.Log("tables ready in %s (replica caught up, pages written)", time.Since(t0).Round(100*time.Millisecond))
	fg, err := foregroundPool(ctx, c, cfg.Workers)
	if err != nil {
		return nil, err
	}
	defer fg.Close()
	gen := newGenerator(fg, cfg.Scale, cfg.ReadOnly, cfg.Workers)
	rep.Rate = cfg.Rate
	if rep.Rate == 0 {
		cal, err := Calibrate(ctx, cfg, gen)
		if err != nil {
			return nil, err
		}
		rep.Calibration, rep.Rate = cal, cal.Rate
		cfg.Log("calibrated: %.0f transactions/s", cal.Rate)
	}
	e := &env{c: c, gen: gen, admin: admin, cores: cfg.Cores}
	var upTo int64
	for _, name := range cfg.Scenarios {
		sc := scenarioNamed(name)
		rep.Scenarios = append(rep.Scenarios, sc)
		one := func(n int, pol policy) (Result, error) {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			r, disturbed, err := undisturbed(cfg.MaxSteal, cfg.Reruns, func(r Result) float64 { return r.Steal }, func() (Result, error) {
				if err := restore(ctx, c, admin, upTo); err != nil {
					return Result{}, err
				}
				r, err := runOne(ctx, cfg, e, rep.Rate, sc, pol)
				if err != nil {
					return Result{}, fmt.Errorf("replay: %s / %s: %w", sc.Name, pol.label(), err)
				}
				r.Rep, upTo = n, r.upTo
				cfg.Log("%-16s %-14s %d/%d  tps %6.1f  p99 %7.1f ms (worst second %ds: %.1f ms, steal %s %%)  above target %4.1f s  rows %8d  steal %s %%", sc.Name, r.Policy, n, cfg.Repeat, r.TPS, ms(r.P99), r.WorstSecond, ms(r.WorstSecondP99), stealText(r.WorstSecondSteal), r.AboveTarget, r.Rows, stealText(r.Steal))
				return r, nil
			}, func(r Result) {
				cfg.Log("%-16s %-14s %d/%d  discarded: the hypervisor took %s %% of the CPU time (over %s %%); running it again", sc.Name, r.Policy, n, cfg.Repeat, stealText(r.Steal), stealText(cfg.MaxSteal))
				rep.Discarded = append(rep.Discarded, r)
			})
			if err != nil {
				return Result{}, err
			}
			r.Disturbed = disturbed
			rep.Results = append(rep.Results, r)
			return r, nil
		}
		// The first repetition decides the fixed rates from its own
		// unthrottled run; the others run the same policies, every
		// other one in reverse.
		var unthrottled *Result
		var pols []policy
		for pol := range expand(cfg, &unthrottled) {
			r, err := one(1, pol)
			if err != nil {
				return nil, err
			}
			if pol.kind == PolicyUnthrottled {
				unthrottled = &r
			}
			pols = append(pols, pol)
		}
		for n := 2; n <= cfg.Repeat; n++ {
			order := slices.Clone(pols)
			if n%2 == 0 {
				slices.Reverse(order)
			}
			for _, pol := range order {
				if _, err := one(n, pol); err != nil {
					return nil, err
				}
			}
		}
	}
	rep.Summaries = summarize(rep.Results)
	if cfg.OutDir != "" {
		for i := range rep.Summaries {
			s := &rep.Summaries[i]
			r := &rep.Results[s.median]
			r.Plot = filepath.Join(cfg.OutDir, fmt.Sprintf("%s-%s.png", s.Scenario, s.Policy))
			if err := plotRun(r.Plot, *r, scenarioNamed(r.Scenario), rep.Rate); err != nil {
				return nil, err
			}
			s.Plot = r.Plot
		}
	}
	return rep, nil
}

func scenarioNamed(name string) Scenario {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s
		}
	}
	return Scenario{Name: name}
}

// policy is one run's way of pacing the job.
type policy struct {
	kind string
	rate float64 // fixed only
}

func (p policy) label() string {
	if p.kind == PolicyFixed {
		return "fixed-" + strconv.FormatFloat(p.rate, 'g', 3, 64)
	}
	return p.kind
}

// expand turns the configured policies into runs. Fixed rates are
// decided when the first fixed run comes, after the unthrottled one.
func expand(cfg Config, unthrottled **Result) func(func(policy) bool) {
	return func(yield func(policy) bool) {
		for _, k := range PolicyNames {
			if !slices.Contains(cfg.Policies, k) {
				continue
			}
			if k != PolicyFixed {
				if !yield(policy{kind: k}) {
					return
				}
				continue
			}
			rates := cfg.FixedRates
			if len(rates) == 0 {
				rates = []float64{1, 2, 4}
				if u := *unthrottled; u != nil && u.Batches > 0 {
					rates = nil
					perSec := float64(u.Batches) / cfg.RunLength.Seconds()
					for _, f := range fixedFractions {
						rates = append(rates, roundRate(f*perSec))
					}
				}
			}
			for _, r := range rates {
				if !yield(policy{kind: PolicyFixed, rate: r}) {
					return
				}
			}
		}
	}
}

// roundRate rounds a rate to two significant digits.
func roundRate(r float64) float64 {
	if r <= 0 {
		return 0.1
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(r, 'g', 2, 64), 64)
	return math.Max(0.1, v)
}

func foregroundPool(ctx context.Context, c *pgcluster.Cluster, workers int) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns, pcfg.MinConns = int32(workers), int32(workers)
	pcfg.ConnConfig.RuntimeParams["application_name"] = "replay_foreground"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	// Open every connection now, so no run pays for connecting (or meets
	// a connection storm while it does).
	var conns []*pgxpool.Conn
	for range workers {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("replay: foreground connection: %w", err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Release()
	}
	return pool, nil
}

// jobName is the cleanup job's name; its sessions carry
// application_name throttled:replay_cleanup.
const jobName = "replay_cleanup"

// jobConfig is the cleanup job's configuration, the same under every
// policy.
func jobConfig(rows int64, target time.Duration, maxBatch int) jobs.Config {
	maxBatch = cmp.Or(maxBatch, DefaultMaxBatch)
	return jobs.Config{Name: jobName, InitialBatchSize: min(500, maxBatch), MaxBatchSize: maxBatch, TargetBatchDuration: cmp.Or(target, DefaultBatchTarget), Total: rows / 2}
}

// DefaultMaxBatch is Config.MaxBatch's default.
const DefaultMaxBatch = 5000

// DefaultBatchTarget is Config.BatchTarget's default.
const DefaultBatchTarget = 250 * time.Millisecond

// runOne runs sc under pol once, from the current table state.
func runOne(ctx context.Context, cfg Config, e *env, rate float64, sc Scenario, pol policy) (Result, error) {
	c := cfg.Cluster
	res := Result{Scenario: sc.Name, Policy: pol.label(), FixedRate: pol.rate}
	mon, err := startMonitor(ctx, c, cfg.Cores)
	if err != nil {
		return res, err
	}
	defer mon.close()
	d := cfg.RunLength
	// The foreground runs alone for the warm-up before the measured
	// window: its connections and plans settle, and the policy's pacing
	// client, opened a fifth of the way in, samples it before the job
	// starts, as a sidecar running before the job would. Only
	// transactions scheduled in the window count.
	warm := time.Now().Add(500 * time.Millisecond)
	start := warm.Add(cfg.Warmup)
	end := start.Add(d)
	rec := newRecorder(start)
	gctx, stopGen := context.WithCancel(ctx)
	defer stopGen()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { e.gen.run(gctx, rate, warm, cfg.Warmup+d, cfg.Seed, rec) })
	if !sleepUntil(ctx, warm.Add(cfg.Warmup/5)) {
		return res, ctx.Err()
	}
	job, stopPacing, err := newJob(ctx, cfg, pol, &res.upTo)
	if err != nil {
		stopGen()
		return res, err
	}
	defer stopPacing()
	var eventErr error
	wg.Go(func() { eventErr = runEvents(ctx, sc, e, start, d) })
	jctx, stopJob := context.WithDeadline(ctx, end)
	defer stopJob()
	jobDone := make(chan error, 1)
	if job != nil {
		go func() {
			if !sleepUntil(jctx, start) {
				jobDone <- nil
				return
			}
			jobDone <- job.Run(jctx)
		}()
	} else {
		jobDone <- nil
	}
	res.series = mon.watch(ctx, start, end, job)
	stopJob()
	jobErr := <-jobDone
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if jobErr != nil && !errors.Is(jobErr, context.Canceled) && !errors.Is(jobErr, context.DeadlineExceeded) {
		return res, fmt.Errorf("cleanup job: %w", jobErr)
	}
	if eventErr != nil {
		res.EventErrors = eventErr.Error()
	}
	secs := d.Seconds()
	rec.mu.Lock()
	res.Completed, res.Failed = rec.ok, rec.failed
	res.P50, res.P99, res.P999 = rec.all.Quantile(0.5), rec.all.Quantile(0.99), rec.all.Quantile(0.999)
	res.series.latency = rec.perSec
	res.WorstSecond, res.WorstSecondP99 = worstSecond(rec.perSec)
	res.series.done = rec.done
	rec.mu.Unlock()
	res.TPS = float64(res.Completed) / secs
	res.AboveTarget, res.AboveCritical, res.Samples, res.Unreadable, res.MaxLag = mon.summary(res.series)
	res.Steal = res.series.steal
	res.WorstSecondSteal = secondSteal(res.series.stealPerSec, res.WorstSecond)
	if job != nil {
		st := job.Status()
		res.Rows, res.Batches, res.Retries = st.Rows, st.Batches, st.Retries
		res.Finished = st.State == jobs.StateDone
		res.RowsPerSec = float64(st.Rows) / secs
	}
	return res, nil
}

// newJob builds the cleanup job under pol (nil for foreground alone)
// and returns what stops its pacing.
func newJob(ctx context.Context, cfg Config, pol policy, upTo *int64) (*jobs.Job, func(), error) {
	c := cfg.Cluster
	noop := func() {}
	if pol.kind == PolicyForeground || pol.kind == PolicyForegroundAgain {
		return nil, noop, nil
	}
	pcfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return nil, noop, err
	}
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, noop, err
	}
	purge, err := jobs.DeleteOlderThan(ctx, pool, EventsTable, "created_at", "id", Retention)
	if err != nil {
		pool.Close()
		return nil, noop, err
	}
	// Remember how far the job's windows reached, so restore re-inserts
	// only that far.
	batch := func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		r, err := purge(ctx, tx, b)
		if err == nil && r.Position != "" {
			if k, perr := strconv.ParseInt(r.Position, 10, 64); perr == nil {
				for {
					cur := atomic.LoadInt64(upTo)
					if k <= cur || atomic.CompareAndSwapInt64(upTo, cur, k) {
						break
					}
				}
			}
		}
		return r, err
	}
	jcfg := jobConfig(cfg.Rows, cfg.BatchTarget, cfg.MaxBatch)
	if pol.kind == PolicyAdaptive || pol.kind == PolicyAdaptiveLoad {
		opts := throttled.Options{
			PrimaryDSN:          c.Primary.DSN(pgcluster.RoleMonitor),
			ReplicaDSNs:         []string{c.Replica.DSN(pgcluster.RoleMonitor)},
			Cores:               float64(cfg.Cores),
			NoForegroundLatency: pol.kind == PolicyAdaptiveLoad,
		}
		opts.Signals.ForegroundLatencyHeldBaseline = pol.kind == PolicyAdaptive && cfg.HeldBaseline
		if pol.kind == PolicyAdaptive && cfg.ForegroundTarget != 0 {
			rule := throttle.DefaultForegroundLatencyRule
			rule.Target = cfg.ForegroundTarget
			opts.Controller.Rules = map[signals.Name]throttle.Rule{signals.ForegroundLatency: rule}
		}
		client, err := throttled.Open(ctx, opts)
		if err != nil {
			pool.Close()
			return nil, noop, err
		}
		job, err := client.Job(jcfg, pool, batch)
		if err != nil {
			client.Close()
			pool.Close()
			return nil, noop, err
		}
		return job, func() { client.Close(); pool.Close() }, nil
	}
	var p *basePacer
	var r rule
	var initial float64
	switch pol.kind {
	case PolicyUnthrottled:
		p = newBasePacer(rate.Inf)
	case PolicyFixed:
		p = newBasePacer(rate.Limit(pol.rate))
	case PolicyLagOnly:
		p, r, initial = newBasePacer(baseInitRate), lagOnly, baseInitRate
	case PolicyBinary:
		p, r, initial = newBasePacer(baseMaxRate), binary, baseMaxRate
		p.set(baseMaxRate, false) // no go before the first check
	}
	job, err := jobs.New(jcfg, pool, p, batch)
	if err != nil {
		pool.Close()
		return nil, noop, err
	}
	if r == nil {
		return job, pool.Close, nil
	}
	// The baseline's own sampler, as a real deployment of it would have.
	poller, err := signals.New(signals.Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor),
		ReplicaDSNs: []string{c.Replica.DSN(pgcluster.RoleMonitor)}, Cores: float64(cfg.Cores)})
	if err == nil {
		err = poller.Connect(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, noop, err
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = poller.Run(pctx) })
	wg.Go(func() { pace(pctx, p, poller, r, initial) })
	return job, func() { cancel(); wg.Wait(); poller.Close(); pool.Close() }, nil
}

// OracleSlack is how much the oracle's p99 may exceed foreground alone's.
const OracleSlack = 1.10

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
