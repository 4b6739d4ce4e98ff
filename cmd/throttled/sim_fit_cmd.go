//go:build lab

package main

import (
	"fmt"
	"io"
	"math"
	"os"

	"github.com/spf13/cobra"
	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/lab/sim"
	"github.com/throttled/throttled/internal/lab/simfit"
)

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

The canary's model is fitted the same way to the probe blocks (--probes), whose instrument ran the
product's canary commit every 50 ms under every window: canary(x) = 1 + c*x^d, the probes' mean latency in
a policy window over that in its alone neighbours. Beside it, per scenario, the foreground's p99 ratio is
fitted to the same pairs, and the canary's median where that reaches 1.10 is the canary reading that
corresponds to the p99 goal.

Writes the constants to --out (internal/lab/sim/plantfit.json, which the simulator embeds: rebuild to run with
them) and prints a table per scenario, and each fixed rate's and unthrottled's median ratio beside the fit's
at its median rows, to judge the fit by. ` + "`make sim-fit`" + ` runs it and regenerates docs/SIMULATION.md's tables.`,
		Example: "  throttled sim fit\n  throttled sim fit --results docs/replay --probes docs/replay/probe --out internal/lab/sim/plantfit.json\n  throttled sim fit --out '' --markdown",
		Args:    cobra.NoArgs,
		Annotations: map[string]string{
			annotationExit: "Exit codes: 0 ok, 1 runtime failure (results unreadable, no scenario fitted, no canary model for surge, --out not written), 2 usage.",
		},
		RunE: action(func(cmd *cobra.Command) int {
			return runSimFit(o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.results, "results", "docs/replay", "directory of the replay's results files, one per scenario")
	fs.StringVar(&o.probes, "probes", "docs/replay/probe", "directory of the replay's probe blocks (run with the instrument's canary), one per scenario")
	fs.StringVar(&o.out, "out", "internal/lab/sim/plantfit.json", "write the fitted constants to this file; empty writes none")
	fs.BoolVar(&o.markdown, "markdown", false, "print the tables as Markdown (as in docs/SIMULATION.md)")
	return cmd
}

// simFitOptions are the flags of `throttled sim fit`.
type simFitOptions struct {
	results, probes, out string
	markdown             bool
}

func runSimFit(o simFitOptions, out, errOut io.Writer) int {
	blocks, err := replay.ReadBlocks(o.results)
	if err != nil {
		return fail(errOut, "sim fit", err)
	}
	probes, err := replay.ReadBlocks(o.probes)
	if err != nil {
		return fail(errOut, "sim fit", err)
	}
	fit, all, canaries := simfit.FitAll(blocks, probes)
	if len(fit.Models) == 0 {
		return fail(errOut, "sim fit", fmt.Errorf("no scenario fitted: no results file with a foreground in %s", o.results))
	}
	if _, ok := fit.Model("surge"); !ok {
		return fail(errOut, "sim fit", fmt.Errorf("no model for surge, the simulator's default counterpart: %s/surge.json is missing or has no foreground", o.results))
	}
	if _, ok := fit.CanaryModel("surge"); !ok {
		return fail(errOut, "sim fit", fmt.Errorf("no canary model for surge, the simulator's default counterpart: %s/surge.json is missing or was run without the instrument's canary", o.probes))
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
		fmt.Fprintf(errOut, "wrote %s (%d scenarios); the simulator embeds internal/lab/sim/plantfit.json: rebuild to run with it\n", o.out, len(fit.Models))
	}
	if o.markdown {
		writeSimFitMarkdown(out, all, canaries)
	} else {
		writeSimFitTable(out, all, canaries)
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

func writeSimFitTable(w io.Writer, all []simfit.Scenario, canaries []simfit.CanaryScenario) {
	fmt.Fprintf(w, "%s\n\n", sim.LatencyForm)
	table := func(head []string, rows [][]string) { writeTextTable(w, head, rows) }
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
	fmt.Fprintf(w, "\nThe canary (the probe blocks): %s\n\n", sim.CanaryForm)
	table(simCanaryHead, simCanaryRows(canaries))
	fmt.Fprintln(w, "\nEach policy's medians over its pairs: the p99 ratio, the canary's mean and p90 ratios, the fit's canary at its median rows/s, and adaptive's own canary (its controller's raw reading).")
	fmt.Fprintln(w)
	table(simCanaryCheckHead, simCanaryChecks(canaries))
	for _, s := range canaries {
		if !s.Fitted {
			fmt.Fprintf(w, "\n%s: canary not fitted: %s\n", s.Name, s.Reason)
		}
	}
}

var simCanaryHead = []string{"scenario", "pairs", "unthrottled rows/s", "c", "d", "residual sd", "outliers", "p99 a", "p99 b", "x at p99 1.10", "canary at p99 1.10"}

var simCanaryCheckHead = []string{"scenario", "policy", "pairs", "rows/s", "x", "p99 ratio", "canary mean ratio", "canary p90 ratio", "fitted canary", "adaptive's own canary"}

// simCanaryRows are the canary fit's rows, as text.
func simCanaryRows(canaries []simfit.CanaryScenario) [][]string {
	var rows [][]string
	for _, s := range canaries {
		m := s.Model
		if !s.Fitted {
			rows = append(rows, []string{s.Name, fmt.Sprint(m.Points), "-", "-", "-", "-", "-", "-", "-", "-", "-"})
			continue
		}
		goalX, atGoal := "-", "-"
		if m.GoalX > 0 {
			goalX, atGoal = fmt.Sprintf("%.4f", m.GoalX), fmt.Sprintf("%.3f", m.AtGoal)
		}
		rows = append(rows, []string{s.Name, fmt.Sprint(m.Points), fmt.Sprintf("%.0f", m.UnthrottledRowsPerSec),
			fmt.Sprintf("%.3f", m.C), fmt.Sprintf("%.3f", m.D), fmt.Sprintf("%.3f", m.ResidualSD), fmt.Sprint(m.Outliers),
			fmt.Sprintf("%.3f", m.P99A), fmt.Sprintf("%.3f", m.P99B), goalX, atGoal})
	}
	return rows
}

// simCanaryChecks are the canary's per-policy medians, as text.
func simCanaryChecks(canaries []simfit.CanaryScenario) [][]string {
	num := func(f string, v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}
	var rows [][]string
	for _, s := range canaries {
		for _, c := range s.Checks {
			rows = append(rows, []string{s.Name, c.Policy, fmt.Sprint(c.Pairs), fmt.Sprintf("%.0f", c.RowsPerSec),
				fmt.Sprintf("%.3f", c.RowsPerSec/s.Model.UnthrottledRowsPerSec), num("%.2f", c.P99), num("%.3f", c.Mean),
				num("%.3f", c.P90), fmt.Sprintf("%.3f", c.Fitted), num("%.3f", c.OwnRaw)})
		}
	}
	return rows
}

// writeSimFitMarkdown writes the fit's tables as Markdown.
func writeSimFitMarkdown(w io.Writer, all []simfit.Scenario, canaries []simfit.CanaryScenario) {
	table := func(head []string, text int, rows [][]string) { writeMarkdownTable(w, head, text, rows) }
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
	fmt.Fprintln(w, "\nThe canary, fitted to the probe blocks (`docs/replay/probe`):")
	fmt.Fprintln(w)
	table(simCanaryHead, 1, simCanaryRows(canaries))
	fmt.Fprintln(w)
	table(simCanaryCheckHead, 2, simCanaryChecks(canaries))
	for _, s := range canaries {
		if !s.Fitted {
			fmt.Fprintf(w, "\n%s: canary not fitted: %s.\n", s.Name, s.Reason)
		}
	}
}
