package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/throttled/throttled/internal/replay"
	"github.com/throttled/throttled/internal/sim"
	"github.com/throttled/throttled/internal/simfit"
)

func newSimCmd() *cobra.Command {
	var o simOptions
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "compare pacing policies on simulated scenarios",
		Long: "Compares pacing policies on simulated scenarios: the controller, unchanged, against a modelled primary and replica. Deterministic: the same seed gives the same results.\n\n" +
			"Each policy's foreground p99 ratio (its p99 over the foreground alone's: the median over the run's seconds, and the share of seconds over 1.10) comes from a latency model fitted to the replay's measurements (docs/replay) by `throttled sim fit`; no policy reads it.",
		Example: "  throttled sim --scenario all --markdown\n  throttled sim --scenario step --policy adaptive --json\n  throttled sim fit",
		Args:    cobra.NoArgs,
		Annotations: map[string]string{
			annotationExit: "Exit codes: 0 ok, 1 runtime failure (a plot not written), 2 usage.",
		},
		RunE: action(func(cmd *cobra.Command) int {
			return runSim(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.scenario, "scenario", "all", "scenario to run, or all")
	fs.StringVar(&o.policy, "policy", "all", "policy to run ("+strings.Join(sim.PolicyNames, ", ")+"), or all")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed; the same seed gives the same results")
	fs.BoolVar(&o.json, "json", false, "print one JSON array of results")
	fs.BoolVar(&o.markdown, "markdown", false, "print the table as Markdown (as in docs/SIMULATION.md)")
	fs.StringVar(&o.plotDir, "plot", "", "write one PNG per scenario (load, rate and oracle over time) into this directory")
	cmd.AddCommand(newSimFitCmd())
	// sim runs by itself and has a command under it: its usage line says
	// both.
	const usageLine = "{{if .HasAvailableSubCommands}}{{.CommandPath}} <command> [flags]{{else}}{{.UseLine}}{{end}}"
	if !strings.Contains(helpTemplate, usageLine) {
		panic("sim: the help template's usage line changed")
	}
	cmd.SetHelpTemplate(strings.Replace(helpTemplate, usageLine, "{{.UseLine}}{{if .HasAvailableSubCommands}}\n       {{.CommandPath}} <command> [flags]{{end}}", 1))
	return cmd
}

// simOptions are the flags of `throttled sim`.
type simOptions struct {
	scenario, policy, plotDir string
	seed                      uint64
	json, markdown            bool
}

func runSim(ctx context.Context, o simOptions, out, errOut io.Writer) int {
	scenario, policy, plotDir, seed, asJSON, asMarkdown := o.scenario, o.policy, o.plotDir, o.seed, o.json, o.markdown
	var scenarios []sim.Scenario
	if scenario == "all" {
		scenarios = sim.Scenarios()
	} else {
		sc, ok := sim.ScenarioNamed(scenario)
		if !ok {
			var names []string
			for _, s := range sim.Scenarios() {
				names = append(names, s.Name)
			}
			return fail(errOut, "sim", usageError(fmt.Errorf("--scenario: unknown %q; want one of %s, or all", scenario, strings.Join(names, ", "))))
		}
		scenarios = []sim.Scenario{sc}
	}
	policies := sim.PolicyNames
	if policy != "all" {
		if !slices.Contains(sim.PolicyNames, policy) {
			return fail(errOut, "sim", usageError(fmt.Errorf("--policy: unknown %q; want one of %s, or all", policy, strings.Join(sim.PolicyNames, ", "))))
		}
		policies = []string{policy}
	}
	var results []sim.Result
	for _, sc := range scenarios {
		var perScenario []sim.Result
		for _, p := range policies {
			if ctx.Err() != nil {
				return fail(errOut, "sim", ctx.Err())
			}
			r, err := sim.Run(sc, p, seed)
			if err != nil {
				return fail(errOut, "sim", err)
			}
			perScenario = append(perScenario, r)
		}
		if plotDir != "" {
			path, err := sim.Plot(plotDir, sc, perScenario)
			if err != nil {
				return fail(errOut, "sim", err)
			}
			fmt.Fprintf(errOut, "wrote %s\n", path)
		}
		results = append(results, perScenario...)
	}
	if asJSON {
		enc := json.NewEncoder(out)
		if err := enc.Encode(results); err != nil {
			return fail(errOut, "sim", err)
		}
		return exitOK
	}
	if asMarkdown {
		writeSimMarkdown(out, results)
		return exitOK
	}
	writeSimTable(out, results)
	return exitOK
}

// writeSimMarkdown writes results as a Markdown table.
func writeSimMarkdown(w io.Writer, results []sim.Result) {
	fmt.Fprintln(w, "| scenario | policy | above target s | above critical s | first cut s | efficiency | reversals/10 min | work while paused | p99 ratio | p99 over 1.10 |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		cut := "-"
		if r.FirstCut != nil {
			cut = fmt.Sprintf("%.0f", *r.FirstCut)
		}
		policy := r.Policy
		if policy == "adaptive" {
			policy = "**adaptive**"
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %s | %.2f | %.1f | %.0f | %.2f | %.0f %% |\n", r.Scenario, policy, r.TimeAboveTarget,
			r.TimeAboveCritical, cut, r.Efficiency, r.ReversalsPer10Min, r.WorkWhilePaused, r.P99RatioMedian, 100*r.P99OverGoalShare)
	}
}

func writeSimTable(w io.Writer, results []sim.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpolicy\tabove target s\tabove critical s\tfirst cut s\tefficiency\treversals/10min\twork while paused\tp99 ratio\tp99 over 1.10\t")
	for _, r := range results {
		cut := "-"
		if r.FirstCut != nil {
			cut = fmt.Sprintf("%.0f", *r.FirstCut)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%.2f\t%.1f\t%.0f\t%.2f\t%.0f %%\t\n", r.Scenario, r.Policy, r.TimeAboveTarget,
			r.TimeAboveCritical, cut, r.Efficiency, r.ReversalsPer10Min, r.WorkWhilePaused, r.P99RatioMedian, 100*r.P99OverGoalShare)
	}
	tw.Flush()
}

func newSimFitCmd() *cobra.Command {
	var o simFitOptions
	cmd := &cobra.Command{
		Use:   "fit",
		Short: "fit the simulator's foreground-latency model to the replay's measurements",
		Long: `Fits the simulator's foreground-latency model to the replay's measurements: for each scenario's results
file (--results), every policy window's foreground p99 ratio (its p99 over the foreground alone's next to it)
against the rows the job cleaned per second, x being those rows over the median of the scenario's unthrottled
windows'. The model is ratio(x) = 1 + a*x^b (a >= 0, b > 0: 1 with no job, never lower with more), fitted by
least absolute deviations of ln ratio (the ratio's median, so a window struck by a stall weighs no more than
any other), with the spread of ln ratio around it (1.4826 times the median absolute residual) and the
hypervisor's steal over the scenario's seconds.

Writes the constants to --out (internal/sim/plantfit.json, which the simulator embeds: rebuild to run with
them) and prints a table per scenario, and each fixed rate's and unthrottled's median ratio beside the fit's
at its median rows, to judge the fit by. ` + "`make sim-fit`" + ` runs it and regenerates docs/SIMULATION.md's tables.`,
		Example: "  throttled sim fit\n  throttled sim fit --results docs/replay --out internal/sim/plantfit.json\n  throttled sim fit --out '' --markdown",
		Args:    cobra.NoArgs,
		Annotations: map[string]string{
			annotationExit: "Exit codes: 0 ok, 1 runtime failure (results unreadable, no scenario fitted, --out not written), 2 usage.",
		},
		RunE: action(func(cmd *cobra.Command) int {
			return runSimFit(o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.results, "results", "docs/replay", "directory of the replay's results files, one per scenario")
	fs.StringVar(&o.out, "out", "internal/sim/plantfit.json", "write the fitted constants to this file; empty writes none")
	fs.BoolVar(&o.markdown, "markdown", false, "print the tables as Markdown (as in docs/SIMULATION.md)")
	return cmd
}

// simFitOptions are the flags of `throttled sim fit`.
type simFitOptions struct {
	results, out string
	markdown     bool
}

func runSimFit(o simFitOptions, out, errOut io.Writer) int {
	blocks, err := replay.ReadBlocks(o.results)
	if err != nil {
		return fail(errOut, "sim fit", err)
	}
	fit, all := simfit.FitBlocks(blocks)
	if len(fit.Models) == 0 {
		return fail(errOut, "sim fit", fmt.Errorf("no scenario fitted: no results file with a foreground in %s", o.results))
	}
	if _, ok := fit.Model("surge"); !ok {
		return fail(errOut, "sim fit", fmt.Errorf("no model for surge, the simulator's default counterpart: %s/surge.json is missing or has no foreground", o.results))
	}
	if o.out != "" {
		raw, err := fit.MarshalIndent()
		if err != nil {
			return fail(errOut, "sim fit", err)
		}
		if _, err := sim.ParseLatencyFit(raw); err != nil {
			return fail(errOut, "sim fit", err)
		}
		if err := os.WriteFile(o.out, raw, 0o644); err != nil {
			return fail(errOut, "sim fit", err)
		}
		fmt.Fprintf(errOut, "wrote %s (%d scenarios); the simulator embeds internal/sim/plantfit.json: rebuild to run with it\n", o.out, len(fit.Models))
	}
	if o.markdown {
		writeSimFitMarkdown(out, all)
	} else {
		writeSimFitTable(out, all)
	}
	return exitOK
}

// simFitRow is one scenario's row of the fit's tables, as text.
func simFitRow(s simfit.Scenario) []string {
	m := s.Model
	steal := []string{fmt.Sprintf("%.0f %%", 100*m.Steal.OverShare), fmt.Sprintf("%.3f", m.Steal.P99)}
	if !s.Fitted {
		return append([]string{s.Name, fmt.Sprint(m.Points), "-", "-", "-", "-", "-", "-"}, steal...)
	}
	return append([]string{s.Name, fmt.Sprint(m.Points), fmt.Sprintf("%.0f", m.UnthrottledRowsPerSec),
		fmt.Sprintf("%.3f", m.A), fmt.Sprintf("%.3f", m.B), fmt.Sprintf("%.3f", m.ResidualSD), fmt.Sprint(m.Outliers),
		fmt.Sprintf("%.0f %%", 100*noiseOverGoal(m.ResidualSD))}, steal...)
}

// noiseOverGoal is the share of seconds the model puts over 1.10 with no
// job: its noise alone.
func noiseOverGoal(sd float64) float64 {
	if sd <= 0 {
		return 0
	}
	return 0.5 * math.Erfc(math.Log(sim.P99Goal)/sd/math.Sqrt2)
}

var simFitHead = []string{"scenario", "points", "unthrottled rows/s", "a", "b", "residual sd", "outliers", "over 1.10 with no job", "steal over 10 %", "steal p99"}

var simFitCheckHead = []string{"scenario", "policy", "pairs", "rows/s", "x", "fitted ratio", "measured ratio"}

// simFitChecks are the checks' rows, as text.
func simFitChecks(all []simfit.Scenario) [][]string {
	var rows [][]string
	for _, s := range all {
		for _, c := range s.Checks {
			rows = append(rows, []string{s.Name, c.Policy, fmt.Sprint(c.Pairs), fmt.Sprintf("%.0f", c.RowsPerSec),
				fmt.Sprintf("%.3f", c.RowsPerSec/s.Model.UnthrottledRowsPerSec), fmt.Sprintf("%.2f", c.Fitted), fmt.Sprintf("%.2f", c.Measured)})
		}
	}
	return rows
}

func writeSimFitTable(w io.Writer, all []simfit.Scenario) {
	fmt.Fprintf(w, "%s\n\n", sim.LatencyForm)
	table := func(head []string, rows [][]string) {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		tw.Flush()
	}
	var rows [][]string
	for _, s := range all {
		rows = append(rows, simFitRow(s))
	}
	table(simFitHead, rows)
	fmt.Fprintln(w, "\nThe fixed rates and unthrottled: the fit at their median rows/s against their median measured ratio.")
	fmt.Fprintln(w)
	table(simFitCheckHead, simFitChecks(all))
	for _, s := range all {
		if !s.Fitted {
			fmt.Fprintf(w, "\n%s: not fitted: %s\n", s.Name, s.Reason)
		}
	}
}

// writeSimFitMarkdown writes the fit's tables as Markdown.
func writeSimFitMarkdown(w io.Writer, all []simfit.Scenario) {
	// table's first text columns are left-aligned, the numbers right.
	table := func(head []string, text int, rows [][]string) {
		fmt.Fprintf(w, "| %s |\n|", strings.Join(head, " | "))
		for i := range head {
			if i < text {
				fmt.Fprint(w, "---|")
			} else {
				fmt.Fprint(w, "---:|")
			}
		}
		fmt.Fprintln(w)
		for _, r := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
	}
	var rows [][]string
	for _, s := range all {
		rows = append(rows, simFitRow(s))
	}
	table(simFitHead, 1, rows)
	fmt.Fprintln(w)
	table(simFitCheckHead, 2, simFitChecks(all))
	for _, s := range all {
		if !s.Fitted {
			fmt.Fprintf(w, "\n%s: not fitted: %s.\n", s.Name, s.Reason)
		}
	}
}
