package main

import (
	"context"
	"encoding/json"
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
	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/replay"
	"github.com/throttled/throttled/throttle"
)

func newBenchCmd() *cobra.Command {
	bench := &cobra.Command{
		Use:     "bench",
		Short:   "replay: foreground latency and cleanup throughput per pacing policy on a throwaway pair",
		Long:    "Benchmarks on a throwaway primary and replica; replay is the one.",
		Example: "  throttled bench replay --short\n  throttled bench replay --out out/replay --doc docs/BENCHMARKS.md",
		Args:    cobra.NoArgs,
		// Without a benchmark: the help, and exit code 2.
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return exitCode(exitUsage)
		},
	}
	var o replayOptions
	var f replayFlags
	replayCmd := &cobra.Command{
		Use:   "replay",
		Short: "foreground latency and cleanup throughput under every pacing policy, on a throwaway primary and replica",
		Long: `throttled bench replay: a pgbench-like foreground at a fixed arrival rate, a cleanup through the jobs
library, and six scenarios, each run under every pacing policy from the same table state on a throwaway
primary and streaming replica, three times over, every other time in reverse (about 2 hours 45 minutes;
--short about 3). The tables give each policy's medians over the repetitions. It writes the tables, results.json
and one PNG per run; --doc rewrites the replay section of a Markdown file. --cores is this machine's:
the primary runs here, so THROTTLED_CORES (a production primary's) does not apply.`,
		Example:     "  throttled bench replay --short\n  throttled bench replay --out out/replay --doc docs/BENCHMARKS.md",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{annotationEnv: "none"},
		RunE: action(func(cmd *cobra.Command) int {
			if err := checkFrom(cmd.Flags(), o); err != nil {
				return fail(cmd.ErrOrStderr(), "bench replay", err)
			}
			if err := f.check(&o); err != nil {
				return fail(cmd.ErrOrStderr(), "bench replay", err)
			}
			if o.from != "" {
				if !cmd.Flags().Changed("out") {
					// Beside the results it renders, not over another run's.
					o.outDir = filepath.Dir(o.from)
				}
				return renderReplay(o, givenFlags(cmd.Flags()), cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runReplay(cmd.Context(), o, givenFlags(cmd.Flags()), cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	replayCmd.Flags().SortFlags = false // givenFlags: in the order given
	f.register(replayCmd.Flags(), &o)
	bench.AddCommand(replayCmd)
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
	cfg    replay.Config
	outDir string
	doc    string
	// from is a finished replay's results.json to render again.
	from string
}

// Short runs: the two scenarios that tell the policies apart most, four
// policies, 15 s each.
var (
	shortScenarios = []string{"2026-09-13", "cpu-hog"}
	shortPolicies  = []string{replay.PolicyForeground, replay.PolicyUnthrottled, replay.PolicyLagOnly, replay.PolicyAdaptive}
)

// replayFlags are the flags of `throttled bench replay` that check
// turns into replayOptions.
type replayFlags struct {
	short                      bool
	scenarios, policies, fixed string
}

func (f *replayFlags) register(fs *pflag.FlagSet, o *replayOptions) {
	fs.BoolVar(&f.short, "short", false, "two scenarios, four policies, 15 s runs (about 3 minutes)")
	fs.StringVar(&f.scenarios, "scenario", "all", "comma-separated scenarios ("+strings.Join(replay.ScenarioNames(), ", ")+"), or all")
	fs.StringVar(&f.policies, "policy", "all", "comma-separated policies ("+strings.Join(replay.PolicyNames, ", ")+"), or all")
	fs.StringVar(&f.fixed, "fixed-rates", "", "comma-separated batches/s for the fixed policy (default: 2.5, 5, 10 and 25 % of unthrottled's)")
	fs.Float64Var(&o.cfg.ForegroundTarget, "foreground-target", 0, fmt.Sprintf("adaptive's foreground_latency target, a multiple of the canary's job-free baseline above 1 (default: the product's, %g); for choosing one on this database", throttle.DefaultForegroundLatencyRule.Target))
	fs.BoolVar(&o.cfg.HeldBaseline, "held-baseline", false, "run adaptive with the canary's baseline measured only while the jobs are held (signals.Config.ForegroundLatencyHeldBaseline), for comparing it with the default")
	fs.DurationVar(&o.cfg.RunLength, "run", 0, "length of each run (default 35s; 15s with --short)")
	fs.IntVar(&o.cfg.Repeat, "repeat", 0, "runs of every scenario and policy; the tables give the medians (default 3; 1 with --short)")
	fs.DurationVar(&o.cfg.Warmup, "warmup", 0, "foreground alone before each run, the policy's sampler up (default 5s)")
	fs.Float64Var(&o.cfg.Rate, "rate", 0, "foreground arrival rate, transactions/s (default: calibrated on this machine)")
	fs.Int64Var(&o.cfg.Rows, "rows", 0, "rows of the cleaned table, half old (default 24000000; 6000000 with --short)")
	fs.DurationVar(&o.cfg.BatchTarget, "batch-target", replay.DefaultBatchTarget, "the cleanup's target batch duration under every policy (shorter: smaller batches, more of them)")
	fs.IntVar(&o.cfg.MaxBatch, "max-batch-size", replay.DefaultMaxBatch, "the cleanup's largest batch, in keys (about half are old rows), under every policy")
	fs.Uint64Var(&o.cfg.Seed, "seed", 1, "seed of the foreground arrivals")
	fs.Float64Var(&o.cfg.MaxSteal, "max-steal", replay.DefaultMaxSteal, "run a run again when the hypervisor took more than this share of the CPU time the machine wanted (steal, /proc/stat); -1 keeps every run")
	fs.IntVar(&o.cfg.Reruns, "reruns", replay.DefaultReruns, "how many times one run disturbed by steal is run again before it is kept and marked; -1 for none")
	fs.IntVar(&o.cfg.Cores, "cores", runtime.NumCPU(), "the primary's cores (it runs on this machine)")
	fs.StringVar(&o.outDir, "out", "out/replay", "directory for the tables, results.json and one PNG per run")
	fs.StringVar(&o.doc, "doc", "", "rewrite the replay section of this markdown file (between "+replay.BeginMarker+" and "+replay.EndMarker+")")
	fs.StringVar(&o.from, "from", "", "run nothing: render the tables of a finished replay again from its results.json, with this build's rules (after a change to the report); only --out and --doc apply")
}

// fromFlags are the flags --from leaves meaning to: it runs nothing.
var fromFlags = []string{"from", "out", "doc"}

// parseReplayFlags parses the flags of `throttled bench replay` as the
// command does.
func parseReplayFlags(args []string, errOut io.Writer) (replayOptions, error) {
	var o replayOptions
	var f replayFlags
	fs := newFlagSet("bench replay", errOut, nil)
	f.register(fs, &o)
	if err := parseArgs(fs, args); err != nil {
		return o, err
	}
	if err := checkFrom(fs, o); err != nil {
		return o, err
	}
	return o, f.check(&o)
}

// checkFrom refuses, with --from, the flags that would shape a run: it
// runs none, so they would be silently ignored.
func checkFrom(fs *pflag.FlagSet, o replayOptions) error {
	if o.from == "" {
		return nil
	}
	var bad []string
	fs.Visit(func(f *pflag.Flag) {
		if !slices.Contains(fromFlags, f.Name) {
			bad = append(bad, "--"+f.Name)
		}
	})
	if len(bad) > 0 {
		return usageError(fmt.Errorf("--from renders a finished replay again and runs nothing; %s would not apply (only --out and --doc do)", strings.Join(bad, ", ")))
	}
	return nil
}

// check validates the flags and fills o's lists from them.
func (f *replayFlags) check(o *replayOptions) error {
	short, scenarios, policies, fixed := f.short, f.scenarios, f.policies, f.fixed
	if short {
		o.cfg.Scenarios, o.cfg.Policies = shortScenarios, shortPolicies
		if o.cfg.RunLength == 0 {
			o.cfg.RunLength = 15 * time.Second
		}
		if o.cfg.Rows == 0 {
			o.cfg.Rows = 6_000_000
		}
		if o.cfg.Repeat == 0 {
			o.cfg.Repeat = 1
		}
		o.cfg.CalibrateStep = 2 * time.Second
	}
	list := func(flagName, v string, known []string) ([]string, error) {
		if v == "all" {
			return nil, nil
		}
		var out []string
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(known, s) {
				return nil, usageError(fmt.Errorf("--%s: unknown %q; want one of %s, or all", flagName, s, strings.Join(known, ", ")))
			}
			out = append(out, s)
		}
		return out, nil
	}
	var err error
	if scenarios != "all" || !short {
		if o.cfg.Scenarios, err = list("scenario", scenarios, replay.ScenarioNames()); err != nil {
			return err
		}
	}
	if policies != "all" || !short {
		if o.cfg.Policies, err = list("policy", policies, replay.PolicyNames); err != nil {
			return err
		}
	}
	if short && o.cfg.Scenarios == nil {
		o.cfg.Scenarios = shortScenarios
	}
	if short && o.cfg.Policies == nil {
		o.cfg.Policies = shortPolicies
	}
	if fixed != "" {
		for _, s := range strings.Split(fixed, ",") {
			var r float64
			if _, err := fmt.Sscan(strings.TrimSpace(s), &r); err != nil || r <= 0 {
				return usageError(fmt.Errorf("--fixed-rates: %q is not a positive number", s))
			}
			o.cfg.FixedRates = append(o.cfg.FixedRates, r)
		}
	}
	if o.cfg.Cores <= 0 {
		return usageError(fmt.Errorf("--cores must be positive, got %d", o.cfg.Cores))
	}
	if o.cfg.RunLength != 0 && o.cfg.RunLength < 5*time.Second {
		return usageError(fmt.Errorf("--run must be at least 5s, got %s", o.cfg.RunLength))
	}
	if o.cfg.Repeat < 0 {
		return usageError(fmt.Errorf("--repeat must be at least 1, got %d", o.cfg.Repeat))
	}
	if o.cfg.Warmup < 0 {
		return usageError(fmt.Errorf("--warmup must not be negative, got %s", o.cfg.Warmup))
	}
	if o.cfg.Rate < 0 {
		return usageError(fmt.Errorf("--rate must be positive, got %v", o.cfg.Rate))
	}
	if o.cfg.MaxBatch < 1 {
		return usageError(fmt.Errorf("--max-batch-size must be at least 1, got %d", o.cfg.MaxBatch))
	}
	if o.cfg.BatchTarget <= 0 {
		return usageError(fmt.Errorf("--batch-target must be positive, got %s", o.cfg.BatchTarget))
	}
	if s := o.cfg.MaxSteal; !(s < 0 || (s > 0 && s < 1)) {
		return usageError(fmt.Errorf("--max-steal is a share of the CPU time between 0 and 1, such as 0.03, or -1 to keep every run; got %v", s))
	}
	if o.cfg.Reruns == 0 {
		o.cfg.Reruns = -1 // none; the Config's 0 is its default
	}
	if t := o.cfg.ForegroundTarget; t != 0 {
		if err := throttle.CheckForegroundTarget(t); err != nil {
			return usageError(fmt.Errorf("--foreground-target %w", err))
		}
	}
	return nil
}

func runReplay(ctx context.Context, o replayOptions, args []string, out, errOut io.Writer) int {
	fmt.Fprintln(out, "Starting a throwaway PostgreSQL primary and streaming replica...")
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return fail(errOut, "bench replay", err)
	}
	defer c.Stop()
	if _, err := benchReplay(ctx, c, o, replayCommand(args), out); err != nil {
		return fail(errOut, "bench replay", err)
	}
	return exitOK
}

// benchReplay runs the replay on c and writes its results: the tables to
// out and to <outDir>/replay.md, results.json and the PNGs to outDir, the
// section to the document when asked.
func benchReplay(ctx context.Context, c *pgcluster.Cluster, o replayOptions, command string, out io.Writer) (*replay.Report, error) {
	started := time.Now()
	cfg := o.cfg
	cfg.Cluster = c
	cfg.OutDir = o.outDir
	cfg.Log = func(format string, args ...any) {
		fmt.Fprintf(out, "%6.0fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	rep, err := replay.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	rep.Command = command
	if err := writeReplay(rep, o, out); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "Done in %s.\n", time.Since(started).Round(time.Second))
	return rep, nil
}

// replayCommand is the command line of `throttled bench replay` with
// args, as the section names it.
func replayCommand(args []string) string {
	return strings.Join(append([]string{"throttled bench replay"}, args...), " ")
}

// renderReplay renders the tables of the replay whose results.json is
// o.from again, and writes them as a run would.
func renderReplay(o replayOptions, args []string, out, errOut io.Writer) int {
	rep, err := replay.Load(o.from, replayCommand(args))
	if err != nil {
		return fail(errOut, "bench replay", err)
	}
	if err := writeReplay(rep, o, out); err != nil {
		return fail(errOut, "bench replay", err)
	}
	return exitOK
}

// writeReplay writes rep's section to out and to <outDir>/replay.md,
// rep to <outDir>/results.json, and the section to the document when
// asked.
func writeReplay(rep *replay.Report, o replayOptions, out io.Writer) error {
	section := rep.Section(rep.Command)
	fmt.Fprintln(out)
	fmt.Fprint(out, section)
	if o.outDir != "" {
		if err := os.MkdirAll(o.outDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.outDir, "replay.md"), []byte(section), 0o644); err != nil {
			return err
		}
		js, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.outDir, "results.json"), js, 0o644); err != nil {
			return err
		}
		plots := "and one PNG per run"
		if rep.Rendered != "" {
			plots = "(the PNGs are the run's)"
		}
		fmt.Fprintf(out, "\nWrote %s: replay.md, results.json %s.\n", o.outDir, plots)
	}
	if o.doc != "" {
		if err := replay.WriteDoc(o.doc, section); err != nil {
			return err
		}
		fmt.Fprintf(out, "Rewrote the replay section of %s.\n", o.doc)
	}
	return nil
}
