//go:build lab

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// Markers of the step-response table in docs/BENCHMARKS.md.
const (
	stepBegin = "<!-- step:begin -->"
	stepEnd   = "<!-- step:end -->"
)

// stepOptions are the flags of `throttled bench step`.
type stepOptions struct {
	scenarios   string
	step        replay.StepConfig
	results     string
	calibration string
	doc         string
	render      bool
}

func newBenchStepCmd() *cobra.Command {
	var o stepOptions
	cmd := &cobra.Command{
		Use:   "step",
		Short: "adaptive's step response on a throwaway pair: from a disturbance's onset to the first cut, from its relief to 80 % of the budget",
		Long: `throttled bench step: adaptive's job works throughout on a throwaway primary and streaming replica, beside
the scenario's foreground, while the scenario's disturbance comes and goes (--reps times, --on then --off). The
trace of its budget, read every 100 ms, goes to <results>/step-<scenario>.json; --doc renders the table from
every step file present, with each scenario's p50 and p95 of both over its paced reps. A scenario with no
disturbance of its own (write-heavy, quiet) is stepped by its foreground doubled. A closed-loop policy's
replay window is at least three times the longer of the two.`,
		Example:     "  throttled bench step --scenario surge,cpu-hog --doc docs/BENCHMARKS.md",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{annotationEnv: "none"},
		RunE: action(func(cmd *cobra.Command) int {
			command := strings.Join(append([]string{"throttled bench step"}, givenFlags(cmd.Flags())...), " ")
			if !o.render {
				if err := runStep(cmd.Context(), o, cmd.OutOrStdout()); err != nil {
					return fail(cmd.ErrOrStderr(), "bench step", err)
				}
			}
			if o.doc != "" {
				runs, err := replay.ReadSteps(o.results)
				if err != nil {
					return fail(cmd.ErrOrStderr(), "bench step", err)
				}
				if err := replay.WriteMarked(o.doc, stepBegin, stepEnd, replay.StepSection(runs, command)); err != nil {
					return fail(cmd.ErrOrStderr(), "bench step", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Rewrote the step-response table of %s from %d runs.\n", o.doc, len(runs))
			}
			return exitOK
		}),
	}
	cmd.Flags().SortFlags = false
	o.register(cmd.Flags())
	return cmd
}

func (o *stepOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.scenarios, "scenario", "surge", "comma-separated scenarios whose disturbance is stepped ("+strings.Join(replay.ScenarioNames(), ", ")+")")
	fs.DurationVar(&o.step.Settle, "settle", 30*time.Second, "the disturbance off before the first onset")
	fs.DurationVar(&o.step.On, "on", 20*time.Second, "each disturbance's length")
	fs.DurationVar(&o.step.Off, "off", 40*time.Second, "each relief's length: the longest a recovery is timed")
	fs.IntVar(&o.step.Reps, "reps", 3, "onsets per scenario")
	fs.StringVar(&o.results, "results", replay.DefaultResults, "directory of the step files")
	fs.StringVar(&o.calibration, "calibration", "docs/replay/calibration.json", "the calibration file (the foreground's rate)")
	fs.StringVar(&o.doc, "doc", "", "rewrite the step-response table of this markdown file (between "+stepBegin+" and "+stepEnd+")")
	fs.BoolVar(&o.render, "render", false, "run nothing: render --doc from the step files present")
	fs.IntVar(&o.step.Block.Cores, "cores", runtime.NumCPU(), "the primary's cores (it runs on this machine)")
}

func runStep(ctx context.Context, o stepOptions, out io.Writer) error {
	if o.step.Reps < 1 || o.step.On <= 0 || o.step.Off <= 0 || o.step.Settle <= 0 {
		return usageError(fmt.Errorf("--reps must be at least 1 and --settle, --on and --off positive"))
	}
	var list []string
	for _, s := range strings.Split(o.scenarios, ",") {
		list = append(list, strings.TrimSpace(s))
	}
	fmt.Fprintln(out, "Starting a throwaway PostgreSQL primary and streaming replica...")
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	started := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.0fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	cfg := o.step
	cfg.Block.Cluster, cfg.Block.Log = c, logf
	// Half old: at the job's ceiling on this machine (about 10,000
	// rows a second) a trace of ten onsets (430 s) cleans about 4.3
	// million; 8 million left it none in the last onsets.
	cfg.Block.Rows = 20_000_000
	scale, workers := replayScale(cfg.Block.Cores)
	cfg.Block.Scale, cfg.Block.Workers = scale, workers
	be, err := replay.OpenBlockEnv(ctx, c, cfg.Block.Cores, scale, workers, cfg.Block.Rows, logf)
	if err != nil {
		return err
	}
	defer be.Close()
	mc, err := calibration(ctx, be, replayOptions{calibration: o.calibration, block: replay.BlockConfig{Cores: cfg.Block.Cores}}, logf)
	if err != nil {
		return err
	}
	cfg.Block.Rate = mc.Rate
	for i, name := range list {
		cfg.Block.Scenario = name
		if i > 0 {
			// Each scenario's job starts on every old row.
			if err := be.Restore(ctx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		s, err := replay.RunStep(ctx, be, cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := replay.WriteStep(o.results, s); err != nil {
			return err
		}
		for i, r := range s.Analyse() {
			logf("%s rep %d: budget %.1f/s before; cut after %.1f s; trough %.1f/s; back to 80 %% %.1f s after relief", name, i+1, r.Before, r.Cut, r.Trough, r.Recover)
		}
	}
	return nil
}
