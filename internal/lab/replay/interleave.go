package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/throttle"
)

// interleave.go runs one scenario as one block on the real pair (see
// block.go). Why interleaved windows rather than paired runs in ABBA
// order: the hypervisor's steal and the machine's drift move over tens of
// seconds, and a run of 35 s restored and settled between runs compared
// policies minutes apart (foreground alone's p99 moved ±21-26 % between
// two runs of it). Windows of a few seconds, each policy's between two
// of the foreground alone, compare within seconds, continue from the
// table's state instead of restoring it, and give every policy ten and
// more pairs in the time one old run took with its restore.

// BlockConfig configures RunBlock. The zero value of every field but
// Cluster, Scenario and Rate means its default.
type BlockConfig struct {
	// Cluster is the primary and replica. Required.
	Cluster *pgcluster.Cluster
	// Cores is the primary's CPU cores. Defaults to runtime.NumCPU().
	Cores int
	// Scenario names the scenario (ScenarioNames). Required.
	Scenario string
	// Rate is the calibrated foreground arrival rate, transactions per
	// second; the scenario scales it (quiet: a tenth; idle: none).
	// Required unless the scenario has no foreground.
	Rate float64
	// Policies are the policies that get windows, in any order; alone
	// windows come between them. Default BlockPolicies.
	Policies []string
	// FixedFractions are the fixed policy's rates as fractions of the
	// batches per second unthrottled did in its windows. Default
	// DefaultFixedFractions.
	FixedFractions []float64
	// WindowSeconds is a closed-loop policy's window (the controllers,
	// lag-only, binary) and a/a's: long enough for a controller to act
	// in, at least three times its step response (docs/BENCHMARKS.md,
	// `throttled bench step`). Default DefaultWindowSeconds.
	WindowSeconds int
	// OpenWindowSeconds is an open-loop policy's window (unthrottled, the
	// fixed rates), and AloneSeconds an alone window's. Both default to
	// DefaultOpenWindowSeconds, or to WindowSeconds where it is shorter.
	OpenWindowSeconds int
	AloneSeconds      int
	// Pairs is how many windows each closed-loop policy and a/a gets.
	// Default DefaultPairs.
	Pairs int `json:"pairs"`
	// OpenPairs is unthrottled's windows (it sets the fixed rates) and
	// FixedPairs each fixed rate's. Default DefaultUnthrottledPairs and
	// DefaultOpenPairs, or Pairs where it is fewer.
	OpenPairs, FixedPairs int
	// AloneDrop is how many first seconds of each alone window the
	// statistics leave out: the last policy window's batch commits and
	// its WAL is flushed in them. Default 1.
	AloneDrop int
	// Warmup is the foreground alone before the first window, its
	// connections and plans settling and every policy's sampler reading
	// it. Default DefaultWarmup.
	Warmup time.Duration
	// Rows, MaxBatch, BatchTarget, Scale, ReadOnly, Workers and
	// ForegroundTarget are as in Config.
	Rows             int64
	MaxBatch         int
	BatchTarget      time.Duration
	Scale            int
	ReadOnly         float64
	Workers          int
	ForegroundTarget float64
	// Probe runs a canary of the instrument's own throughout the block: a
	// one-row commit (the product's canary statement, without its
	// counts) every 50 ms on a connection of its own, its latencies kept
	// per second (Second.Probe). It measures what a canary would read
	// under every policy's windows alike, beside the foreground's p99,
	// for fitting the simulator's canary; off, the block is as without it.
	Probe bool
	// ClientNice, when not 0, is the nice value every thread of this
	// process (the generator, the jobs' clients) runs at during the
	// block (ShieldClient): -10 shields the measuring client from the
	// job's backend on a machine whose cores they share. 0 leaves them.
	ClientNice int
	// Seed seeds the windows' order and the arrivals. Default 1.
	Seed uint64
	// Log, when set, receives one line per step.
	Log func(format string, args ...any)
	// promURL is the lab's Prometheus, for adaptive-app.
	promURL string
}

// DefaultWarmup is the foreground alone before a block's first window,
// by default.
const DefaultWarmup = 5 * time.Second

// AppWarmup is the foreground alone before the first window of a block
// with adaptive-app: the signal's delay, then readings for its job-free
// baseline.
const AppWarmup = 30 * time.Second

// policies is the policies a block of sc runs.
func policies(cfg BlockConfig, sc Scenario) []string {
	if sc.NoForeground {
		return slices.DeleteFunc(slices.Clone(cfg.Policies), func(p string) bool { return p == PolicyAA || p == PolicyFixed || p == PolicyAdaptiveApp })
	}
	return cfg.Policies
}

// BlockPolicies are the policies a block runs by default: the
// instrument's own check (a/a), unthrottled, the fixed rates for the
// frontier, and the controller. Each closed-loop policy costs six 20 s
// windows and their alone neighbours, about two and a half minutes, so
// the candidates (adaptive-load, adaptive-tail, adaptive-held,
// adaptive-app), lag-only and binary run when named: a scenario of the
// defaults fits in eight minutes.
var BlockPolicies = []string{PolicyAA, PolicyUnthrottled, PolicyFixed, PolicyAdaptive}

// DefaultFixedFractions are the fixed rates, as fractions of the
// batches per second unthrottled did in its windows: on this 2-core machine the rate
// that keeps the foreground within +10 % sat between 2.5 % and 25 % of
// unthrottled's in every scenario of the old replay.
var DefaultFixedFractions = []float64{0.02, 0.06, 0.15, 0.4}

// The block's default shape. A closed-loop window is at least three times
// adaptive's step response on this machine (docs/BENCHMARKS.md, "Step
// response"); open-loop and alone windows are shorter, where the window
// table shows an open-loop policy reads the same at either length.
const (
	DefaultWindowSeconds     = 20
	DefaultOpenWindowSeconds = 5
	// DefaultAloneSeconds: four, one of them left out (AloneDrop), so a
	// block of every default policy fits in eight minutes with its setup.
	DefaultAloneSeconds = 4
	DefaultPairs        = 6
	DefaultOpenPairs    = 3
	// DefaultUnthrottledPairs: unthrottled's windows set the fixed rates
	// and show the job's harm at its worst; two do both, and leave the
	// fixed rates, which come after, old rows to clean.
	DefaultUnthrottledPairs = 2
)

// DefaultClientNice is the measuring process's nice value in a block
// (BlockConfig.ClientNice): on two cores, the job's backend took the CPU
// from the generator too, and its client part's p99 rose by a quarter of
// the whole p99's excess over alone (surge, adaptive's windows; the window
// table's blocks, which run unshielded).
const DefaultClientNice = -10

func (c *BlockConfig) fill() {
	var base Config
	base.Cluster, base.Cores, base.Rows, base.MaxBatch, base.BatchTarget = c.Cluster, c.Cores, c.Rows, c.MaxBatch, c.BatchTarget
	base.Scale, base.ReadOnly, base.Workers = c.Scale, c.ReadOnly, c.Workers
	base.fill()
	c.Cores, c.Scale, c.ReadOnly, c.Workers = base.Cores, base.Scale, base.ReadOnly, base.Workers
	c.Rows = cmp.Or(c.Rows, DefaultBlockRows)
	if len(c.Policies) == 0 {
		c.Policies = BlockPolicies
	}
	if len(c.FixedFractions) == 0 {
		c.FixedFractions = DefaultFixedFractions
	}
	c.WindowSeconds = cmp.Or(c.WindowSeconds, DefaultWindowSeconds)
	c.OpenWindowSeconds = cmp.Or(c.OpenWindowSeconds, min(DefaultOpenWindowSeconds, c.WindowSeconds))
	c.AloneSeconds = cmp.Or(c.AloneSeconds, min(DefaultAloneSeconds, c.WindowSeconds))
	c.Pairs = cmp.Or(c.Pairs, DefaultPairs)
	c.OpenPairs = cmp.Or(c.OpenPairs, min(DefaultUnthrottledPairs, c.Pairs))
	c.FixedPairs = cmp.Or(c.FixedPairs, min(DefaultOpenPairs, c.Pairs))
	c.AloneDrop = cmp.Or(c.AloneDrop, 1)
	c.Warmup = cmp.Or(c.Warmup, DefaultWarmup)
	c.Seed = cmp.Or(c.Seed, 1)
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
}

// DefaultBlockRows is the cleaned table's size for blocks: half of it
// old, enough for every policy's windows of one block where the
// foreground runs at the calibrated rate. On this 2-core machine those
// blocks cleaned 1.0 to 2.7 million rows in all (surge 2.0, replay-paused
// 2.7); quiet and write-heavy cleaned about 6 million, and ask for more
// (Scenario.MinRows). Its setup, about 3 s a million rows with the
// vacuum and the key's index, counts in a scenario's eight minutes: 20
// million took 58 s of `make replay SCENARIO=surge`.
const DefaultBlockRows = 10_000_000

// BlockRowsNeeded is the old rows a block is given: fewer left and the
// table is restored before it (never more than half the table's rows:
// see the callers).
const BlockRowsNeeded = 8_000_000

func (c *BlockConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("replay: "+format, args...)) }
	if c.Cluster == nil {
		bad("Cluster is required")
	}
	sc, ok := scenarioByName(c.Scenario)
	if !ok {
		bad("unknown scenario %q; want one of %v", c.Scenario, ScenarioNames())
	}
	if ok && !sc.NoForeground && !(c.Rate > 0 && !math.IsInf(c.Rate, 0)) {
		bad("Rate must be a positive number of transactions per second (the calibration's), got %v", c.Rate)
	}
	for _, p := range c.Policies {
		if p == PolicyAlone || p == PolicyForeground || p == PolicyForegroundAgain || !slices.Contains(append([]string{PolicyAA, PolicyAdaptiveTail, PolicyAdaptiveHeld, PolicyAdaptiveApp}, PolicyNames...), p) {
			bad("Policies: %q is not a policy a window can run; want some of %s, %v", p, PolicyAA, []string{PolicyUnthrottled, PolicyFixed, PolicyLagOnly, PolicyBinary, PolicyAdaptive, PolicyAdaptiveLoad, PolicyAdaptiveTail, PolicyAdaptiveHeld, PolicyAdaptiveApp})
		}
	}
	if slices.Contains(c.Policies, PolicyFixed) && !slices.Contains(c.Policies, PolicyUnthrottled) {
		bad("Policies: fixed needs unthrottled: its windows set the fixed rates")
	}
	for _, f := range c.FixedFractions {
		if !(f > 0 && f <= 1) {
			bad("FixedFractions: each must be within (0, 1], got %v", f)
		}
	}
	if c.WindowSeconds < 1 || c.OpenWindowSeconds < 1 || c.AloneSeconds < 1 || c.AloneDrop < 0 || c.AloneDrop >= c.AloneSeconds {
		bad("WindowSeconds %d, OpenWindowSeconds %d, AloneSeconds %d and AloneDrop %d: want at least one second kept of each window", c.WindowSeconds, c.OpenWindowSeconds, c.AloneSeconds, c.AloneDrop)
	}
	if c.Pairs < 1 || c.OpenPairs < 1 || c.FixedPairs < 1 {
		bad("Pairs %d, OpenPairs %d and FixedPairs %d: each must be at least 1", c.Pairs, c.OpenPairs, c.FixedPairs)
	}
	if c.ForegroundTarget != 0 {
		if err := throttle.CheckForegroundTarget(c.ForegroundTarget); err != nil {
			bad("ForegroundTarget %v", err)
		}
	}
	return errors.Join(errs...)
}

// Schedule returns a block's windows for policies (fixed expanded into
// its rates): each policy's windows in one stretch, pairs of them (the
// fixed rates share theirs: pairs over their number each), each between
// two alone windows (none when alone is false: a block with no
// foreground has nothing to compare with).
//
// Stretches, not one random order across policies: a controller's own
// sampler runs through the whole block and would read every other
// policy's job in theirs. Interleaved with unthrottled's windows, the
// canary learnt its job-free baseline from them and its budget was cut
// by a neighbour's writes: adaptive did 12 rows a second in surge. Each
// policy is judged against its own neighbouring alone windows, so a slow
// drift across stretches weighs on no comparison. The controllers (and
// a/a) go first, in a seeded random order, before any other job has
// written; then unthrottled, whose windows set the fixed rates; then the
// fixed rates, lag-only and binary.
func Schedule(policies []Window, pairs, windowSeconds, aloneDrop int, alone bool, seed uint64) []Window {
	return ScheduleLayout(policies, Layout{Pairs: pairs, Window: windowSeconds, AloneDrop: aloneDrop, FixedShare: true}, alone, seed)
}

// Layout is a block's shape: how many windows each kind of policy gets
// and how long each is.
type Layout struct {
	// Pairs is each closed-loop policy's windows (the controllers,
	// lag-only, binary) and a/a's.
	Pairs int
	// OpenPairs is unthrottled's windows; 0 means Pairs.
	OpenPairs int `json:"open_pairs,omitempty"`
	// FixedPairs is each fixed rate's windows; 0 means Pairs. With
	// FixedShare the fixed rates share Pairs instead, Pairs over their
	// number each.
	FixedPairs int  `json:"fixed_pairs,omitempty"`
	FixedShare bool `json:"fixed_share,omitempty"`
	// Window is a closed-loop policy's (and a/a's) window, seconds.
	Window int `json:"window"`
	// OpenWindow is unthrottled's and the fixed rates' window; 0 means
	// Window.
	OpenWindow int `json:"open_window,omitempty"`
	// Alone is an alone window's length; 0 means Window.
	Alone int `json:"alone,omitempty"`
	// AloneDrop is the first seconds of each alone window left out.
	AloneDrop int `json:"alone_drop"`
}

// openLoop reports whether policy paces without feedback: its window
// needs no time for a controller to act in.
func openLoop(policy string) bool { return policy == PolicyUnthrottled || policy == PolicyFixed }

// ScheduleLayout is Schedule for a Layout: each kind's windows and their
// lengths as lay says.
func ScheduleLayout(policies []Window, lay Layout, alone bool, seed uint64) []Window {
	lay.OpenPairs = cmp.Or(lay.OpenPairs, lay.Pairs)
	lay.FixedPairs = cmp.Or(lay.FixedPairs, lay.Pairs)
	lay.OpenWindow = cmp.Or(lay.OpenWindow, lay.Window)
	lay.Alone = cmp.Or(lay.Alone, lay.Window)
	rng := rand.New(rand.NewPCG(seed, 0xb10c))
	t := 0
	var out []Window
	add := func(w Window, secs int) {
		w.Start, w.End = t, t+secs
		t = w.End
		out = append(out, w)
	}
	// Every alone window leaves out the same first seconds, after a/a's
	// windows too, where there is no batch to leave out: a/a is judged
	// exactly as a policy is, on alone sides as long as a policy's.
	addAlone := func() {
		if alone {
			add(Window{Policy: PolicyAlone, Dropped: lay.AloneDrop, kind: -1}, lay.Alone)
		}
	}
	kinds := slices.Clone(policies)
	nFixed := 0
	for k := range kinds {
		kinds[k].kind = k
		if kinds[k].Policy == PolicyFixed {
			nFixed++
		}
	}
	group := func(w Window) int {
		switch w.Policy {
		case PolicyAdaptive, PolicyAdaptiveLoad, PolicyAdaptiveTail, PolicyAdaptiveHeld, PolicyAdaptiveApp, PolicyAA:
			return 0
		case PolicyUnthrottled:
			return 1
		case PolicyFixed:
			return 2
		}
		return 3
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	slices.SortStableFunc(kinds, func(a, b Window) int { return group(a) - group(b) })
	addAlone()
	for _, k := range kinds {
		n, secs := lay.Pairs, lay.Window
		switch {
		case k.Policy == PolicyFixed && lay.FixedShare:
			n, secs = max(1, lay.Pairs/nFixed), lay.OpenWindow
		case k.Policy == PolicyFixed:
			n, secs = lay.FixedPairs, lay.OpenWindow
		case k.Policy == PolicyUnthrottled:
			n, secs = lay.OpenPairs, lay.OpenWindow
		}
		for range n {
			add(k, secs)
			addAlone()
		}
	}
	return out
}

// RunBlock runs cfg's scenario as one block on be and returns it.
func RunBlock(ctx context.Context, be *BlockEnv, cfg BlockConfig) (*Block, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sc, _ := scenarioByName(cfg.Scenario)
	began := time.Now()
	if cfg.ClientNice != 0 {
		if err := ShieldClient(cfg.ClientNice); err != nil {
			// Without the privilege the block still measures; it says so,
			// and records the client as unshielded.
			cfg.Log("%s: %v; the measuring client runs unshielded", cfg.Scenario, err)
			cfg.ClientNice = 0
		}
	}
	fgRate := cfg.Rate * cmp.Or(sc.RateFactor, 1)
	if sc.NoForeground {
		fgRate = 0
	}
	var rec0 func(time.Duration)
	gen := newGenerator(be.fg, be.scale, cmp.Or(sc.ReadOnly, cfg.ReadOnly), cfg.Workers)
	gen.small = sc.SmallWrites

	// adaptive-app reads the foreground's own latency from a real
	// Prometheus; its job-free baseline needs a rest longer than the
	// signal's delay before any window.
	if slices.Contains(policies(cfg, sc), PolicyAdaptiveApp) {
		prom, err := startLabProm(ctx)
		if err != nil {
			return nil, err
		}
		defer prom.stop()
		cfg.promURL, cfg.Warmup = prom.URL, max(cfg.Warmup, AppWarmup)
		rec0 = prom.observe
	}
	// Every policy's job, sampler and client open before anything runs:
	// none pays for connecting inside a window, or meets a connection
	// storm while it does. The fixed rates are set from unthrottled's
	// windows, which come before theirs.
	var rows atomic.Int64
	var kinds []Window
	// Without a foreground there is no latency to compare: a/a and the
	// fixed rates (which only place the p99 oracle) say nothing, nor has
	// adaptive-app anything to read, and the block spends its time on the
	// rows.
	for _, p := range policies(cfg, sc) {
		if p != PolicyFixed {
			kinds = append(kinds, Window{Policy: p})
			continue
		}
		for range cfg.FixedFractions {
			kinds = append(kinds, Window{Policy: PolicyFixed, Rate: 1})
		}
	}
	runners := make([]*blockJob, len(kinds))
	for i, k := range kinds {
		bj, err := newBlockJob(ctx, cfg, k, &rows, &be.upTo)
		if err != nil {
			return nil, fmt.Errorf("replay: %s / %s: %w", sc.Name, k.Policy, err)
		}
		defer bj.stop()
		runners[i] = bj
	}
	mon, err := startMonitor(ctx, cfg.Cluster, cfg.Cores)
	if err != nil {
		return nil, err
	}
	defer mon.close()

	lay := cfg.layout()
	windows := ScheduleLayout(kinds, lay, !sc.NoForeground, cfg.Seed)
	total := windows[len(windows)-1].End
	start := time.Now().Add(500 * time.Millisecond).Truncate(100 * time.Millisecond)
	blockAt := start.Add(cfg.Warmup)
	end := blockAt.Add(time.Duration(total) * time.Second)
	gctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	defer wg.Wait()
	rec := newRecorder(blockAt)
	rec.observe = rec0
	if fgRate > 0 {
		wg.Go(func() { gen.run(gctx, fgRate, start, end.Sub(start), cfg.Seed, rec) })
	}
	jobsRun := func(bj *blockJob, label string) {
		if bj == nil || bj.job == nil {
			return
		}
		wg.Go(func() {
			if err := bj.job.Run(gctx); err != nil && !errors.Is(err, context.Canceled) {
				cfg.Log("%s / %s: job: %v", sc.Name, label, err)
			}
		})
	}
	for i, bj := range runners {
		jobsRun(bj, kinds[i].Policy)
	}
	e := &env{c: cfg.Cluster, gen: gen, admin: be.admin, cores: cfg.Cores}
	var eventErr error
	wg.Go(func() { eventErr = runEventsThroughout(gctx, sc, e, end) })
	cfg.Log("%s: %d windows (a stretch per policy: %s; alone %d s between), %s; foreground %.0f tx/s before the scenario's own surge", sc.Name, len(windows), lay, lay.Alone, time.Duration(total)*time.Second, fgRate)

	secs := make([]Second, total)
	probes := newRecorder(blockAt)
	if cfg.Probe {
		conn, err := pgx.Connect(ctx, cfg.Cluster.Primary.DSN(pgcluster.RoleAdmin))
		if err != nil {
			return nil, fmt.Errorf("replay: %s: the probe's connection: %w", sc.Name, err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		wg.Go(func() { probe(gctx, conn, end, probes) })
	}
	var collect sync.WaitGroup
	var working atomic.Pointer[blockJob]
	collect.Go(func() { sampleSeconds(gctx, mon, blockAt, secs, &rows, &working) })
	// Unthrottled's batches in its windows set the fixed rates, before
	// their first window.
	var unBatches int64
	var unSeconds float64
	open := -1
	var openBatches int64
	fixedSet := false
	for wi, w := range windows {
		if !sleepUntil(ctx, blockAt.Add(time.Duration(w.Start)*time.Second)) {
			return nil, ctx.Err()
		}
		if open >= 0 {
			unBatches += runners[open].job.Status().Batches - openBatches
			unSeconds += float64(windows[wi-1].End - windows[wi-1].Start)
			open = -1
		}
		if w.Policy == PolicyFixed && !fixedSet {
			fixedSet = true
			perSec := 0.0
			if unSeconds > 0 {
				perSec = float64(unBatches) / unSeconds
			}
			f := 0
			for i := range kinds {
				if kinds[i].Policy != PolicyFixed {
					continue
				}
				kinds[i].Rate = roundRate(cfg.FixedFractions[f] * perSec)
				runners[i].setRate(kinds[i].Rate)
				f++
			}
			for i := range windows {
				if windows[i].Policy == PolicyFixed {
					windows[i].Rate = kinds[windows[i].kind].Rate
				}
			}
			w = windows[wi]
			cfg.Log("%s: unthrottled did %.1f batches/s in its windows: fixed rates %v", sc.Name, perSec, fixedRates(kinds))
		}
		for i, r := range runners {
			r.gate.set(w.Policy != PolicyAlone && i == w.kind)
		}
		if w.Policy == PolicyAlone {
			working.Store(nil)
		} else {
			working.Store(runners[w.kind])
		}
		if w.Policy == PolicyUnthrottled {
			open, openBatches = w.kind, runners[w.kind].job.Status().Batches
		}
	}
	if !sleepUntil(ctx, end) {
		return nil, ctx.Err()
	}
	for _, r := range runners {
		r.gate.set(false)
	}
	working.Store(nil)
	collect.Wait()
	stopAll()
	wg.Wait()
	rec.mu.Lock()
	for i := range secs {
		secs[i].T = i
		if i < len(rec.perSec) {
			secs[i].Lat = Sparse(rec.perSec[i])
		}
		if i < len(rec.client) {
			secs[i].Client, secs[i].Server = Sparse(rec.client[i]), Sparse(rec.server[i])
		}
	}
	rec.mu.Unlock()
	probes.mu.Lock()
	for i := range secs {
		if i < len(probes.perSec) && probes.perSec[i] != nil && probes.perSec[i].Count() > 0 {
			h := Sparse(probes.perSec[i])
			secs[i].Probe = &h
		}
	}
	probes.mu.Unlock()
	b := &Block{Scenario: sc.Name, Rate: fgRate, WindowSeconds: cfg.WindowSeconds, Layout: &lay, Seed: cfg.Seed, Windows: windows, Seconds: secs, ClientNice: cfg.ClientNice,
		Started: began, Took: time.Since(began).Round(time.Second)}
	if eventErr != nil {
		b.EventErrors = eventErr.Error()
	}
	for i, r := range runners {
		if r.job != nil && r.job.Status().State == jobs.StateDone {
			b.Finished = append(b.Finished, kinds[i].Label())
		}
	}
	return b, b.check()
}

// layout is the block's shape from the config.
func (c *BlockConfig) layout() Layout {
	return Layout{Pairs: c.Pairs, OpenPairs: c.OpenPairs, FixedPairs: c.FixedPairs, Window: c.WindowSeconds,
		OpenWindow: c.OpenWindowSeconds, Alone: c.AloneSeconds, AloneDrop: c.AloneDrop}
}

// String reads like "closed-loop and a/a 6 × 10 s, unthrottled 3 × 5 s,
// each fixed rate 3 × 5 s".
func (l Layout) String() string {
	return fmt.Sprintf("closed-loop and a/a %d × %d s, unthrottled %d × %d s, each fixed rate %d × %d s",
		l.Pairs, l.Window, cmp.Or(l.OpenPairs, l.Pairs), cmp.Or(l.OpenWindow, l.Window), cmp.Or(l.FixedPairs, l.Pairs), cmp.Or(l.OpenWindow, l.Window))
}

func fixedRates(kinds []Window) []float64 {
	var out []float64
	for _, k := range kinds {
		if k.Policy == PolicyFixed {
			out = append(out, k.Rate)
		}
	}
	return out
}

// runEventsThroughout starts every event of sc now and stops it at end:
// in a block the disturbance runs throughout, under every window alike.
func runEventsThroughout(ctx context.Context, sc Scenario, e *env, end time.Time) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, ev := range sc.Events {
		wg.Go(func() {
			stop, err := ev.start(ctx, e, time.Until(end))
			if err == nil {
				sleepUntil(ctx, end)
				err = stop()
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("event %q: %w", ev.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
