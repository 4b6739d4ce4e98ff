//go:build lab

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/throttle"
)

func newBenchCmd() *cobra.Command {
	bench := &cobra.Command{
		Use:     "bench",
		Short:   "replay: foreground latency and cleanup throughput per pacing policy on a throwaway pair",
		Long:    "Benchmarks on a throwaway primary and replica; replay is the one.",
		Example: "  throttled bench replay --short\n  throttled bench replay --scenario surge --doc docs/BENCHMARKS.md",
		Args:    cobra.NoArgs,
		// Without a benchmark: the help, and exit code 2.
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return exitCode(exitUsage)
		},
	}
	var o replayOptions
	replayCmd := &cobra.Command{
		Use:   "replay",
		Short: "foreground latency and cleanup throughput under every pacing policy, on a throwaway primary and replica",
		Long: `throttled bench replay: each scenario runs as one block on a throwaway primary and streaming replica.
The foreground (a pgbench-like mix, open loop at the machine's calibrated rate) and the scenario's disturbance
run throughout, while windows in which one policy's cleanup job works alternate with windows of the foreground
alone. A closed-loop policy's window (--window) is at least three times adaptive's step response (throttled
bench step); open-loop and alone windows are shorter. Each policy window is compared with its neighbours (a
pair); each goal is decided over the pairs pooled: met, not met or undecided, with its interval, and adaptive
against the fixed rates' curve (the frontier). One scenario takes about 8 minutes; --short (one scenario, a/a
and unthrottled) about 3, and runs its block again (twice at most) where the hypervisor's steal took more than
two of a policy's pairs. --window-table runs the window table instead.

Each scenario's seconds go to its own results file (--results, docs/replay/<scenario>.json by default), so
one scenario can run again and be merged; --doc renders the replay section of a Markdown file from every
results file present, with one PNG per scenario. The foreground's rate is read from the calibration file
(docs/replay/calibration.json), measured by --calibrate (or when the file is missing). --cores is this
machine's: the primary runs here, so THROTTLED_CORES (a production primary's) does not apply.`,
		Example:     "  throttled bench replay --short\n  throttled bench replay --scenario surge --doc docs/BENCHMARKS.md\n  throttled bench replay --render --doc docs/BENCHMARKS.md",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{annotationEnv: "none"},
		RunE: action(func(cmd *cobra.Command) int {
			if err := o.check(cmd.Flags()); err != nil {
				return fail(cmd.ErrOrStderr(), "bench replay", err)
			}
			if o.render {
				return renderBlocks(o, replayCommand(givenFlags(cmd.Flags())), cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runReplay(cmd.Context(), o, givenFlags(cmd.Flags()), cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	replayCmd.Flags().SortFlags = false // givenFlags: in the order given
	o.register(replayCmd.Flags())
	bench.AddCommand(replayCmd, newBenchStepCmd())
	return bench
}

// givenFlags is the flags given on the command line, in their order, as
// they would be typed: the command a document says wrote it.
func givenFlags(fs *pflag.FlagSet) []string {
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		switch v := f.Value.String(); {
		case f.Value.Type() == "bool" && v == "true":
			args = append(args, "--"+f.Name)
		default:
			args = append(args, "--"+f.Name, v)
		}
	})
	return args
}

// replayOptions are the flags of `throttled bench replay`.
type replayOptions struct {
	short, calibrate, render bool
	// windowTable runs the window table instead of the scenarios' blocks.
	windowTable bool
	// windowLengths are the window table's lengths.
	windowLengths        []int
	scenarios, policies  string
	block                replay.BlockConfig
	goals                replay.Goals
	results, calibration string
	doc, plots           string
	// list is the scenarios to run, from scenarios.
	list []string
}

// The short run: the instrument's own check and its power (a/a must be
// met, unthrottled not), beside the product's defaults, on surge: twice
// the calibrated rate gives each 2 s window thousands of transactions, so
// a/a's interval is narrow within ten pairs (at the quiet scenario's
// tenth of it, a window's p99 is its fourth-slowest transaction).
var (
	shortScenario = "surge"
	shortPolicies = []string{replay.PolicyAA, replay.PolicyUnthrottled}
	// shortPairs: twelve, not ten: with ten or more a verdict is the
	// median of the pairs' ratios, and at ten a/a's interval on this
	// machine ran 0.13-0.19 wide. What the short run must keep is its
	// power and its calm (TestReplayShortHasPower); the a/a's width is the
	// full tables' to report.
	shortPairs = 12
	// shortWindow: the short run has no closed-loop policy, and at 2 s
	// windows surge's 4,000 transactions a second give each thousands.
	shortWindow = 2
	// shortMaxStolen is the most pairs of one policy the short run lets
	// the hypervisor's steal take before it runs its block again (at most
	// replay.DefaultReruns times, the last run kept): each policy's
	// windows form one stretch of about fifty seconds, and one burst of
	// steal that long once left out ten of a/a's twelve pairs, so the
	// check had two to read. Whether to run again depends only on the
	// machine's steal, never on what the pairs read.
	shortMaxStolen = 2
)

// stolenBeyond names the first policy of b whose pairs steal left out
// more than most of, with how many it kept and lost; "" where none did.
func stolenBeyond(b *replay.Block, g replay.Goals, most int) (string, int, int) {
	for _, pol := range b.Policies() {
		pairs, stolen := replay.Pairs(b, pol, g)
		if stolen > most {
			return pol, len(pairs), stolen
		}
	}
	return "", 0, 0
}

func (o *replayOptions) register(fs *pflag.FlagSet) {
	fs.BoolVar(&o.short, "short", false, "the instrument's own check: the surge scenario with a/a and unthrottled only, 12 pairs, on a smaller table (about 2 minutes); results to out/replay-short")
	fs.StringVar(&o.scenarios, "scenario", "all", "comma-separated scenarios ("+strings.Join(replay.ScenarioNames(), ", ")+"), or all")
	fs.StringVar(&o.policies, "policy", "", "comma-separated policies for the windows (default "+strings.Join(replay.BlockPolicies, ", ")+"; also lag-only, binary, adaptive-load, adaptive-tail, adaptive-held, adaptive-app)")
	fs.BoolVar(&o.calibrate, "calibrate", false, "measure the foreground's rate on this machine again (twice; they must agree within 20 %) and write the calibration file")
	fs.BoolVar(&o.windowTable, "window-table", false, fmt.Sprintf("run the window table instead: for each scenario one block per window length (%v s) with adaptive, unthrottled and one fixed rate; results to <results>/windows/w<W>, the table to --doc", replay.WindowLengths))
	fs.IntSliceVar(&o.windowLengths, "window-lengths", replay.WindowLengths, "the window table's lengths, seconds (with --window-table)")
	fs.BoolVar(&o.render, "render", false, "run nothing: render --doc and the PNGs from the results files present")
	fs.StringVar(&o.results, "results", replay.DefaultResults, "directory of the results files, one per scenario, and the PNGs")
	fs.StringVar(&o.calibration, "calibration", "docs/replay/calibration.json", "the calibration file the runs read (and --calibrate writes)")
	fs.StringVar(&o.doc, "doc", "", "rewrite the replay section of this markdown file (between "+replay.BeginMarker+" and "+replay.EndMarker+") from every results file")
	fs.Float64Var(&o.block.Rate, "rate", 0, "foreground arrival rate, transactions/s (default: the calibration file's)")
	fs.IntVar(&o.block.Pairs, "pairs", replay.DefaultPairs, "windows of each closed-loop policy (the controllers, lag-only, binary) and of a/a")
	fs.IntVar(&o.block.OpenPairs, "open-pairs", replay.DefaultUnthrottledPairs, "windows of unthrottled")
	fs.IntVar(&o.block.FixedPairs, "fixed-pairs", replay.DefaultOpenPairs, "windows of each fixed rate")
	fs.IntVar(&o.block.WindowSeconds, "window", replay.DefaultWindowSeconds, "a closed-loop policy's (and a/a's) window, seconds: at least three times adaptive's step response (throttled bench step)")
	fs.IntVar(&o.block.OpenWindowSeconds, "open-window", replay.DefaultOpenWindowSeconds, "an open-loop policy's window (unthrottled, the fixed rates), seconds; at most --window")
	fs.IntVar(&o.block.AloneSeconds, "alone-window", replay.DefaultAloneSeconds, "an alone window, seconds; at most --window")
	fs.Float64SliceVar(&o.block.FixedFractions, "fixed", replay.DefaultFixedFractions, "the fixed rates, as fractions of the batches per second unthrottled did in its windows")
	fs.DurationVar(&o.block.Warmup, "warmup", 0, fmt.Sprintf("the foreground alone before a block's first window (default %s; %s with adaptive-app)", replay.DefaultWarmup, replay.AppWarmup))
	fs.IntVar(&o.block.AloneDrop, "alone-drop", 1, "first seconds of each alone window left out (the last window's batch and WAL)")
	fs.BoolVar(&o.block.Probe, "probe", false, "run the instrument's own canary throughout each block (a one-row commit every 50 ms) and keep its latencies per second beside the foreground's: what a canary reads under every policy, for fitting the simulator's canary")
	fs.Float64Var(&o.block.ForegroundTarget, "foreground-target", 0, fmt.Sprintf("adaptive's foreground_latency target, a multiple of the canary's job-free baseline above 1 (default: the product's, %g)", throttle.DefaultForegroundLatencyRule.Target))
	fs.Int64Var(&o.block.Rows, "rows", 0, fmt.Sprintf("rows of the cleaned table, half old (default %d, or more where a scenario listed needs more: %d with idle; 8000000 with --short)", replay.DefaultBlockRows, replay.BlockRowsFor([]string{"idle"}, replay.DefaultBlockRows)))
	fs.DurationVar(&o.block.BatchTarget, "batch-target", replay.DefaultBatchTarget, "the cleanup's target batch duration under every policy")
	fs.IntVar(&o.block.MaxBatch, "max-batch-size", replay.DefaultMaxBatch, "the cleanup's largest batch, in keys (about half are old rows), under every policy")
	fs.IntVar(&o.block.ClientNice, "client-nice", replay.DefaultClientNice, "the nice value of this process's threads (the foreground's generator, the jobs' clients) during each block, set after the pair starts so the database keeps its own; 0 leaves them")
	fs.Uint64Var(&o.block.Seed, "seed", 1, "seed of the windows' order and the arrivals")
	fs.Float64Var(&o.goals.MaxSteal, "max-steal", 0.10, "leave out every second in which the hypervisor took more than this share of the CPU time wanted (steal, /proc/stat); -1 keeps every second")
	fs.IntVar(&o.block.Cores, "cores", runtime.NumCPU(), "the primary's cores (it runs on this machine)")
}

// check validates the flags and fills in what they imply.
func (o *replayOptions) check(fs *pflag.FlagSet) error {
	if o.render {
		var bad []string
		fs.Visit(func(f *pflag.Flag) {
			if !slices.Contains([]string{"render", "results", "doc", "max-steal", "calibration"}, f.Name) {
				bad = append(bad, "--"+f.Name)
			}
		})
		if len(bad) > 0 {
			return usageError(fmt.Errorf("--render runs nothing; %s would not apply (only --results, --doc, --calibration and --max-steal do)", strings.Join(bad, ", ")))
		}
	}
	list := func(flagName, v string, known []string) ([]string, error) {
		var out []string
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(known, s) {
				return nil, usageError(fmt.Errorf("--%s: unknown %q; want some of %s", flagName, s, strings.Join(known, ", ")))
			}
			out = append(out, s)
		}
		return out, nil
	}
	var err error
	switch {
	case o.scenarios == "all" && o.short:
		o.list = []string{shortScenario}
	case o.scenarios == "all":
		o.list = replay.ScenarioNames()
	default:
		if o.list, err = list("scenario", o.scenarios, replay.ScenarioNames()); err != nil {
			return err
		}
	}
	switch {
	case o.policies == "" && o.short:
		o.block.Policies = shortPolicies
	case o.policies != "":
		known := []string{replay.PolicyAA, replay.PolicyUnthrottled, replay.PolicyFixed, replay.PolicyLagOnly, replay.PolicyBinary, replay.PolicyAdaptive, replay.PolicyAdaptiveLoad, replay.PolicyAdaptiveTail, replay.PolicyAdaptiveHeld, replay.PolicyAdaptiveApp}
		if o.block.Policies, err = list("policy", o.policies, known); err != nil {
			return err
		}
	}
	if o.short {
		if !fs.Changed("pairs") {
			o.block.Pairs = shortPairs
		}
		if !fs.Changed("open-pairs") {
			o.block.OpenPairs = shortPairs
		}
		for _, f := range []struct {
			name string
			v    *int
		}{{"window", &o.block.WindowSeconds}, {"open-window", &o.block.OpenWindowSeconds}, {"alone-window", &o.block.AloneSeconds}} {
			if !fs.Changed(f.name) {
				*f.v = shortWindow
			}
		}
		if !fs.Changed("results") {
			o.results = "out/replay-short"
		}
		if o.block.Rows == 0 {
			o.block.Rows = 8_000_000
		}
	}
	// Open-loop and alone windows are never longer than a closed-loop
	// one unless asked.
	if !fs.Changed("open-window") {
		o.block.OpenWindowSeconds = min(o.block.OpenWindowSeconds, o.block.WindowSeconds)
	}
	if !fs.Changed("alone-window") {
		o.block.AloneSeconds = min(o.block.AloneSeconds, o.block.WindowSeconds)
	}
	o.block.Rows = max(o.block.Rows, 0)
	if o.block.Rows == 0 {
		o.block.Rows = replay.BlockRowsFor(o.list, replay.DefaultBlockRows)
	}
	switch {
	case o.block.Cores <= 0:
		return usageError(fmt.Errorf("--cores must be positive, got %d", o.block.Cores))
	case o.block.Pairs < 1 || o.block.OpenPairs < 1 || o.block.FixedPairs < 1:
		return usageError(fmt.Errorf("--pairs, --open-pairs and --fixed-pairs must each be at least 1, got %d, %d and %d", o.block.Pairs, o.block.OpenPairs, o.block.FixedPairs))
	case o.block.WindowSeconds < 1 || o.block.OpenWindowSeconds < 1 || o.block.AloneSeconds < 1:
		return usageError(fmt.Errorf("--window %d, --open-window %d and --alone-window %d must each be at least 1", o.block.WindowSeconds, o.block.OpenWindowSeconds, o.block.AloneSeconds))
	case o.block.OpenWindowSeconds > o.block.WindowSeconds || o.block.AloneSeconds > o.block.WindowSeconds:
		return usageError(fmt.Errorf("--open-window %d and --alone-window %d may not be longer than --window %d", o.block.OpenWindowSeconds, o.block.AloneSeconds, o.block.WindowSeconds))
	case o.block.AloneDrop < 0 || o.block.AloneDrop >= o.block.AloneSeconds:
		return usageError(fmt.Errorf("--alone-window %d and --alone-drop %d: want at least one second of each alone window kept", o.block.AloneSeconds, o.block.AloneDrop))
	case slices.ContainsFunc(o.windowLengths, func(w int) bool { return w < 2 }):
		return usageError(fmt.Errorf("--window-lengths: each must be at least 2 seconds, got %v", o.windowLengths))
	case o.block.Rate < 0:
		return usageError(fmt.Errorf("--rate must be positive, got %v", o.block.Rate))
	case o.block.Rows < 100_000:
		return usageError(fmt.Errorf("--rows must be at least 100000, got %d", o.block.Rows))
	case o.block.MaxBatch < 1:
		return usageError(fmt.Errorf("--max-batch-size must be at least 1, got %d", o.block.MaxBatch))
	case o.block.BatchTarget <= 0:
		return usageError(fmt.Errorf("--batch-target must be positive, got %s", o.block.BatchTarget))
	case !(o.goals.MaxSteal < 0 || (o.goals.MaxSteal > 0 && o.goals.MaxSteal < 1)):
		return usageError(fmt.Errorf("--max-steal is a share of the CPU time between 0 and 1, such as 0.1, or -1 to keep every second; got %v", o.goals.MaxSteal))
	}
	if t := o.block.ForegroundTarget; t != 0 {
		if err := throttle.CheckForegroundTarget(t); err != nil {
			return usageError(fmt.Errorf("--foreground-target %w", err))
		}
	}
	return nil
}

// replayCommand is the command line of `throttled bench replay` with
// args, as the section names it.
func replayCommand(args []string) string {
	return strings.Join(append([]string{"throttled bench replay"}, args...), " ")
}

func runReplay(ctx context.Context, o replayOptions, args []string, out, errOut io.Writer) int {
	fmt.Fprintln(out, "Starting a throwaway PostgreSQL primary and streaming replica...")
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return fail(errOut, "bench replay", err)
	}
	defer c.Stop()
	if _, err := benchBlocks(ctx, c, o, replayCommand(args), out); err != nil {
		return fail(errOut, "bench replay", err)
	}
	return exitOK
}

// benchBlocks runs o's scenarios on c, one block each, writes each
// block's results file as it ends, and renders the document when asked.
func benchBlocks(ctx context.Context, c *pgcluster.Cluster, o replayOptions, command string, out io.Writer) ([]*replay.Block, error) {
	started := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.0fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	cfg := o.block
	cfg.Cluster, cfg.Log = c, logf
	scale, workers := replayScale(cfg.Cores)
	be, err := replay.OpenBlockEnv(ctx, c, cfg.Cores, scale, workers, cfg.Rows, logf)
	if err != nil {
		return nil, err
	}
	defer be.Close()
	cfg.Scale, cfg.Workers = scale, workers
	if cfg.Rate == 0 {
		mc, err := calibration(ctx, be, o, logf)
		if err != nil {
			return nil, err
		}
		cfg.Rate = mc.Rate
	}
	if o.windowTable {
		return nil, windowTable(ctx, be, cfg, o, command, logf, out)
	}
	// Each block needs room for every policy's windows; a table running
	// short is filled again between blocks, never inside one.
	refill := func() error {
		if be.OldRowsLeft(cfg.Rows) >= min(replay.BlockRowsNeeded, cfg.Rows/2) {
			return nil
		}
		t0 := time.Now()
		if err := be.Restore(ctx); err != nil {
			return err
		}
		logf("table restored in %s", time.Since(t0).Round(100*time.Millisecond))
		return nil
	}
	var blocks []*replay.Block
	for i, name := range o.list {
		if i > 0 {
			if err := refill(); err != nil {
				return blocks, err
			}
		}
		cfg.Scenario = name
		b, err := replay.RunBlock(ctx, be, cfg)
		for rerun := 1; err == nil && o.short && rerun <= replay.DefaultReruns; rerun++ {
			pol, kept, stolen := stolenBeyond(b, o.goals, shortMaxStolen)
			if pol == "" {
				break
			}
			logf("%s: steal over %.0f %% left out %d of %s's pairs (%d kept): the block runs again (%d of %d)", name, 100*o.goals.MaxSteal, stolen, pol, kept, rerun, replay.DefaultReruns)
			if err = refill(); err != nil {
				break
			}
			b, err = replay.RunBlock(ctx, be, cfg)
		}
		if err != nil {
			return blocks, fmt.Errorf("%s: %w", name, err)
		}
		if err := replay.WriteBlock(o.results, b); err != nil {
			return blocks, err
		}
		r := replay.Evaluate(b, o.goals)
		logf("%s: done in %s; wrote %s", name, b.Took, replay.BlockFile(o.results, name))
		if r.AAErr != nil {
			logf("%s: instrument check (a/a) FAILED: %v", name, r.AAErr)
		} else if slices.Contains(b.Policies(), replay.PolicyAA) {
			logf("%s: instrument check (a/a) passed: %s", name, r.AA)
		}
		for _, p := range r.Policies {
			logf("%s / %-14s p99 %s; rows/s %.0f", name, p.Policy, p.P99, p.RowsPerSec)
		}
		blocks = append(blocks, b)
	}
	if o.doc != "" {
		if err := writeBlocksDoc(o, command, out); err != nil {
			return blocks, err
		}
	}
	fmt.Fprintf(out, "Done in %s.\n", time.Since(started).Round(time.Second))
	return blocks, nil
}

// Markers of the window table in docs/BENCHMARKS.md.
const (
	windowsBegin = "<!-- windows:begin -->"
	windowsEnd   = "<!-- windows:end -->"
)

// windowTable runs, for each of o's scenarios, one block per window
// length, and renders the table.
func windowTable(ctx context.Context, be *replay.BlockEnv, base replay.BlockConfig, o replayOptions, command string, logf func(string, ...any), out io.Writer) error {
	for _, name := range o.list {
		for _, w := range o.windowLengths {
			if be.OldRowsLeft(base.Rows) < min(replay.BlockRowsNeeded, base.Rows/2) {
				if err := be.Restore(ctx); err != nil {
					return err
				}
			}
			cfg := base
			cfg.Scenario = name
			cfg.Policies = []string{replay.PolicyAdaptive, replay.PolicyUnthrottled, replay.PolicyFixed}
			cfg.FixedFractions = []float64{replay.WindowTableFixed}
			cfg.WindowSeconds, cfg.OpenWindowSeconds, cfg.AloneSeconds = w, w, min(w, replay.DefaultOpenWindowSeconds)
			cfg.Pairs = replay.WindowTablePairs(w)
			cfg.OpenPairs, cfg.FixedPairs = max(2, cfg.Pairs/2), max(2, cfg.Pairs/2)
			b, err := replay.RunBlock(ctx, be, cfg)
			if err != nil {
				return fmt.Errorf("%s, %d s windows: %w", name, w, err)
			}
			dir := replay.WindowsDir(o.results, w)
			if err := replay.WriteBlock(dir, b); err != nil {
				return err
			}
			logf("%s, %d s windows: done in %s; wrote %s", name, w, b.Took, replay.BlockFile(dir, name))
		}
	}
	if o.doc != "" {
		return writeWindowsDoc(o, command, out)
	}
	return nil
}

// writeWindowsDoc renders the window table into o.doc from the blocks
// under o.results.
func writeWindowsDoc(o replayOptions, command string, out io.Writer) error {
	byLen, err := replay.ReadWindowBlocks(o.results)
	if err != nil {
		return err
	}
	if len(byLen) == 0 {
		return nil
	}
	if err := replay.WriteMarked(o.doc, windowsBegin, windowsEnd, replay.WindowSection(byLen, o.goals, command)); err != nil {
		return err
	}
	fmt.Fprintf(out, "Rewrote the window table of %s.\n", o.doc)
	return nil
}

// replayScale is the foreground's pgbench scale and connections for a
// primary of cores cores, as the replay's Config defaults them.
func replayScale(cores int) (scale, workers int) {
	return cores, min(24, max(8, 4*cores))
}

// calibration reads the machine's calibration file, or measures it (with
// --calibrate, or when there is none) and writes it. A file measured on a
// different machine is refused: its rate would not be this one's.
func calibration(ctx context.Context, be *replay.BlockEnv, o replayOptions, logf func(string, ...any)) (*replay.MachineCalibration, error) {
	pg, err := be.PostgreSQL(ctx)
	if err != nil {
		return nil, err
	}
	if !o.calibrate {
		mc, err := replay.ReadCalibration(o.calibration)
		switch {
		case err == nil:
			if d := mc.Differs(o.block.Cores, replay.MemoryGiB(), pg); d != "" {
				return nil, fmt.Errorf("%s was measured on another machine (%s): run with --calibrate to measure this one", o.calibration, d)
			}
			logf("calibration: %.0f tx/s, from %s (measured %s)", mc.Rate, o.calibration, mc.At.Format("2006-01-02"))
			return mc, nil
		case !errors.Is(err, os.ErrNotExist):
			return nil, err
		}
		logf("calibration: %s does not exist; measuring this machine", o.calibration)
	}
	mc, err := be.Calibrate(ctx, 2, logf)
	if err != nil {
		return nil, err
	}
	if err := replay.WriteCalibration(o.calibration, mc); err != nil {
		return nil, err
	}
	logf("calibration: %.0f tx/s (repeats %v), written to %s", mc.Rate, mc.Repeats, o.calibration)
	return mc, nil
}

// renderBlocks renders the document and the PNGs from the results files,
// running nothing.
func renderBlocks(o replayOptions, command string, out, errOut io.Writer) int {
	if o.doc == "" {
		return fail(errOut, "bench replay", usageError(errors.New("--render needs --doc: the document to render")))
	}
	if err := writeBlocksDoc(o, command, out); err != nil {
		return fail(errOut, "bench replay", err)
	}
	return exitOK
}

// writeBlocksDoc renders the replay section of o.doc from every results
// file in o.results, and each block's PNG beside its results.
func writeBlocksDoc(o replayOptions, command string, out io.Writer) error {
	blocks, err := replay.ReadBlocks(o.results)
	if err != nil {
		return err
	}
	if len(blocks) == 0 {
		return fmt.Errorf("no results files in %s: run a scenario first", o.results)
	}
	mc, err := replay.ReadCalibration(o.calibration)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, b := range blocks {
		if err := replay.PlotBlock(filepath.Join(o.results, b.Scenario+".png"), b, o.goals); err != nil {
			return err
		}
	}
	rel, err := filepath.Rel(filepath.Dir(o.doc), o.results)
	if err != nil {
		rel = o.results
	}
	long, err := replay.ReadBlocks(replay.LongAADir(o.results))
	if err != nil {
		return err
	}
	section := replay.Section(blocks, long, o.goals, mc, command, o.results, rel)
	if err := replay.WriteDoc(o.doc, section); err != nil {
		return err
	}
	if o.render {
		if err := writeWindowsDoc(o, command, out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "Rewrote the replay section of %s from %d results files in %s.\n", o.doc, len(blocks), o.results)
	return nil
}
