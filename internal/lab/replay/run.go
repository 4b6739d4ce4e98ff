package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/throttle"
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
	// PolicyAdaptiveTail is adaptive with the canary comparing the
	// slowest fifth of its probes rather than their mean
	// (signals.Config.ForegroundLatencyTail): the candidate for the
	// canary's default, judged beside adaptive in the same block.
	PolicyAdaptiveTail = "adaptive-tail"
	// PolicyAdaptiveHeld is adaptive with the canary's baseline measured
	// only while the jobs are held (signals.Config.
	// ForegroundLatencyHeldBaseline), as Envoy re-measures its minimum
	// round trip: judged beside adaptive in the same block.
	PolicyAdaptiveHeld = "adaptive-held"
	// PolicyAdaptiveApp is adaptive with one more signal, the
	// application's own p99 read from Prometheus (prom.go) through the
	// product's Prometheus signal, target 1.10 over its job-free
	// baseline: what a user with a latency objective configures.
	PolicyAdaptiveApp = "adaptive-app"
	// PolicyForegroundAgain is foreground alone once more, after every
	// other run: how far p99 moves between two runs of the same thing,
	// the noise any ratio to foreground alone carries.
	PolicyForegroundAgain = "foreground-again"
)

// PolicyNames lists the policies in run order.
var PolicyNames = []string{PolicyForeground, PolicyUnthrottled, PolicyFixed, PolicyLagOnly, PolicyBinary, PolicyAdaptive, PolicyAdaptiveLoad, PolicyForegroundAgain}

// Config configures [Calibrate] (and BlockConfig's defaults). The zero value of every field but Cluster
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
