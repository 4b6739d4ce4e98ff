//go:build lab

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/throttled/throttled/internal/lab/sim"
	"github.com/throttled/throttled/throttle"
)

func newSimCmd() *cobra.Command {
	var o simOptions
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "compare pacing policies on simulated scenarios",
		Long: "Compares pacing policies on simulated scenarios: the controller, unchanged, against a modelled primary and replica. Deterministic: the same seed gives the same results.\n\n" +
			"Each policy's foreground p99 ratio (its p99 over the foreground alone's: the median over the run's seconds, and the share of seconds over 1.10) comes from a latency model fitted to the replay's measurements (docs/replay) by `throttled sim fit`; no policy reads it.\n\n" +
			"The plant also emits the foreground_latency canary's ratio, from a model fitted to the replay's probe blocks (docs/replay/probe). Only with --canary does adaptive read it: the product's foreground_latency rule (required) at --canary-target, as throttled adds it where the canary can run.",
		Example: "  throttled sim --scenario all --markdown\n  throttled sim --scenario step --policy adaptive --json\n  throttled sim --canary --canary-target 1.05\n  throttled sim fit\n  throttled sim search",
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
	fs.BoolVar(&o.canary, "canary", false, "run adaptive with the product's foreground_latency rule on the simulated canary")
	fs.Float64Var(&o.canaryTarget, "canary-target", throttle.DefaultForegroundLatencyRule.Target, "the foreground_latency rule's target with --canary, a multiple of the canary's job-free latency above 1")
	cmd.AddCommand(newSimFitCmd(), newSimSearchCmd())
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
	canary                    bool
	canaryTarget              float64
}

func runSim(ctx context.Context, o simOptions, out, errOut io.Writer) int {
	scenario, policy, plotDir, seed, asJSON, asMarkdown := o.scenario, o.policy, o.plotDir, o.seed, o.json, o.markdown
	var runOpts sim.Options
	if o.canary {
		if err := throttle.CheckForegroundTarget(o.canaryTarget); err != nil {
			return fail(errOut, "sim", usageError(fmt.Errorf("--canary-target %w", err)))
		}
		runOpts.CanaryTarget = o.canaryTarget
	}
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
			r, err := sim.RunWith(sc, p, seed, runOpts)
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

// writeCanaryNote says, before the table, that adaptive ran with the
// canary's rule, where it did; nothing otherwise.
func writeCanaryNote(w io.Writer, results []sim.Result) {
	for _, r := range results {
		if r.CanaryTarget > 0 {
			fmt.Fprintf(w, "adaptive runs with the foreground_latency rule at %g (required) on the simulated canary.\n\n", r.CanaryTarget)
			return
		}
	}
}

// writeSimMarkdown writes results as a Markdown table.
func writeSimMarkdown(w io.Writer, results []sim.Result) {
	writeCanaryNote(w, results)
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
	writeCanaryNote(w, results)
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

// The generated section of docs/SIMULATION.md that `sim search --doc`
// rewrites.
const (
	searchBegin = "<!-- sim-search: generated by `throttled sim search --doc docs/SIMULATION.md` (make sim-search); do not edit -->\n"
	searchEnd   = "<!-- /sim-search -->"
)

func newSimSearchCmd() *cobra.Command {
	var o simSearchOptions
	cmd := &cobra.Command{
		Use:   "search",
		Short: "search the canary's target and the controller's growth and breach memory in simulation",
		Long: `Runs adaptive in simulation with every combination of the foreground_latency canary's target (1.02, 1.05,
1.1, 1.2, or no canary rule), the controller's largest growth factor a step (1.1, 1.25, 1.5) and its breach
memory (1 and 10 minutes), over the scenarios whose replay counterpart was probed (surge, cpu-hog,
write-heavy, and steady with quiet's models), with seeds 1 to --seeds each. Each setting is read by its work
over the oracle's (the mean over its runs), the share of its runs whose median foreground p99 ratio is over
1.10, and the seconds at or over critical it adds to the foreground alone's in the same scenario and seed.
Each canary target runs again at the product's growth and memory with the canary's noise halved and with
none, apart from the grid: how much of what the canary does is its noise.

Prints every setting, the Pareto front of work against that share, and the setting with the most work
among those with the share at most 10 % and no second added at or over critical (or, where every setting
adds some, no more than the fewest any adds). --doc rewrites the generated part of a document's section
on it (docs/SIMULATION.md, "The canary and the search"). The result does not depend on --workers; with
one, the default search takes about two minutes.`,
		Example: "  throttled sim search\n  throttled sim search --seeds 5\n  throttled sim search --doc docs/SIMULATION.md",
		Args:    cobra.NoArgs,
		Annotations: map[string]string{
			annotationExit: "Exit codes: 0 ok, 1 runtime failure (--doc unreadable, without the section's markers, or not written), 2 usage.",
		},
		RunE: action(func(cmd *cobra.Command) int {
			return runSimSearch(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&o.seeds, "seeds", 20, "seeds per scenario and setting: 1 to this")
	fs.IntVar(&o.workers, "workers", 1, "runs at once; the result is the same with any")
	fs.BoolVar(&o.markdown, "markdown", false, "print the result as Markdown (as in docs/SIMULATION.md)")
	fs.StringVar(&o.doc, "doc", "", "rewrite this document's generated section on the search (docs/SIMULATION.md) with the Markdown")
	return cmd
}

// simSearchOptions are the flags of `throttled sim search`.
type simSearchOptions struct {
	seeds, workers int
	markdown       bool
	doc            string
}

func runSimSearch(ctx context.Context, o simSearchOptions, out, errOut io.Writer) int {
	if o.seeds < 1 {
		return fail(errOut, "sim search", usageError(fmt.Errorf("--seeds %d; want 1 or more", o.seeds)))
	}
	if o.workers < 1 {
		return fail(errOut, "sim search", usageError(fmt.Errorf("--workers %d; want 1 or more", o.workers)))
	}
	var doc []byte
	if o.doc != "" {
		// Read before the search: a missing section fails at once.
		var err error
		if doc, err = os.ReadFile(o.doc); err != nil {
			return fail(errOut, "sim search", err)
		}
		if _, _, ok := searchSection(string(doc)); !ok {
			return fail(errOut, "sim search", fmt.Errorf("%s has no generated section between %q and %q", o.doc, strings.TrimSpace(searchBegin), searchEnd))
		}
	}
	spec := sim.DefaultSearchSpec(o.seeds)
	spec.Workers = o.workers
	if ctx.Err() != nil {
		return fail(errOut, "sim search", ctx.Err())
	}
	res, err := sim.Search(spec, nil)
	if err != nil {
		return fail(errOut, "sim search", err)
	}
	runs := (len(res.Rows) + len(res.Sensitivity)) * len(spec.Scenarios) * len(spec.Seeds)
	fmt.Fprintf(errOut, "sim search: %d settings (and %d for the noise) x %d scenarios x %d seeds = %d runs (and %d with no job) in %s\n",
		len(res.Rows), len(res.Sensitivity), len(spec.Scenarios), len(spec.Seeds), runs, len(spec.Scenarios)*len(spec.Seeds), res.Took.Round(time.Second))
	var md strings.Builder
	writeSearchMarkdown(&md, res)
	if o.doc != "" {
		text := string(doc)
		i, j, _ := searchSection(text)
		text = text[:i] + md.String() + text[j:]
		if err := os.WriteFile(o.doc, []byte(text), 0o644); err != nil {
			return fail(errOut, "sim search", err)
		}
		fmt.Fprintf(errOut, "wrote %s\n", o.doc)
	}
	if o.markdown {
		fmt.Fprint(out, md.String())
		return exitOK
	}
	writeSearchTable(out, res)
	return exitOK
}

// searchSection finds the generated section's body in text: [i, j).
func searchSection(text string) (i, j int, ok bool) {
	i, j = strings.Index(text, searchBegin), strings.Index(text, searchEnd)
	if i < 0 || j < i+len(searchBegin) {
		return 0, 0, false
	}
	return i + len(searchBegin), j, true
}

var searchHead = []string{"canary target", "growth", "breach memory", "work / oracle", "P(p99 > 1.10)", "median p99 ratio", "median canary", "frontier", "P(behind)", "extra s at critical", "runs with extra"}

// searchRow is one setting's row, as text.
func searchRow(r sim.SearchRow) []string {
	return []string{r.Setting.CanaryLabel(), fmt.Sprintf("%g", r.Setting.MaxGrowth), fmtMinutes(r.Setting.BreachMemory),
		fmt.Sprintf("%.3f", r.Efficiency), fmt.Sprintf("%.0f %%", 100*r.POverGoal), fmt.Sprintf("%.2f", r.P99Median),
		fmt.Sprintf("%.3f", r.CanaryMedian), fmt.Sprintf("%.3f", r.Frontier), fmt.Sprintf("%.0f %%", 100*r.PBehind),
		fmt.Sprintf("%.0f", r.ExtraCritical), fmt.Sprint(r.ExtraCriticalRuns)}
}

func fmtMinutes(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return d.String()
}

var searchScenarioHead = []string{"setting", "scenario", "counterpart", "x", "work / oracle", "P(p99 > 1.10)", "median p99 ratio", "median canary", "frontier", "extra s at critical"}

// searchHighlight is a setting the per-scenario table shows.
type searchHighlight struct {
	name string
	row  sim.SearchRow
}

// searchHighlights are the settings the per-scenario table shows: the
// best, the product's defaults with the canary's rule (its noise as
// fitted, and halved) and without it.
func searchHighlights(res sim.SearchResult) []searchHighlight {
	var out []searchHighlight
	if b, ok := sim.Best(res.Rows, sim.LeastExtraCritical(res.Rows)); ok {
		out = append(out, searchHighlight{"best", res.Rows[b]})
	}
	product := sim.Setting{CanaryTarget: throttle.DefaultForegroundLatencyRule.Target, MaxGrowth: sim.DefaultMaxGrowth, BreachMemory: sim.DefaultBreachMemory}
	if i := res.Find(product); i >= 0 {
		out = append(out, searchHighlight{"product (canary 1.1)", res.Rows[i]})
	}
	halved := product
	halved.CanaryNoise = 0.5
	if i := slices.IndexFunc(res.Sensitivity, func(r sim.SearchRow) bool { return r.Setting == halved }); i >= 0 {
		out = append(out, searchHighlight{"product, the canary's noise halved", res.Sensitivity[i]})
	}
	none := product
	none.CanaryTarget = 0
	if i := res.Find(none); i >= 0 {
		out = append(out, searchHighlight{"no canary", res.Rows[i]})
	}
	return out
}

func searchScenarioRows(res sim.SearchResult) [][]string {
	var rows [][]string
	for _, h := range searchHighlights(res) {
		r := h.row
		for k, sc := range res.Spec.Scenarios {
			st := r.PerScenario[k]
			rows = append(rows, []string{h.name + ": " + r.Setting.String(), sc.Name, sc.CanaryModel().Scenario,
				fmt.Sprintf("%.3f", st.X), fmt.Sprintf("%.3f", st.Efficiency), fmt.Sprintf("%.0f %%", 100*st.POverGoal), fmt.Sprintf("%.2f", st.P99Median),
				fmt.Sprintf("%.3f", st.CanaryMedian), fmt.Sprintf("%.3f", st.Frontier), fmt.Sprintf("%.0f", st.ExtraCritical)})
		}
	}
	return rows
}

// searchBest says which setting is best, or that none qualifies: with
// no second added at or over critical, or, where every setting adds
// some, no more than the fewest any adds.
func searchBest(res sim.SearchResult) string {
	describe := func(r sim.SearchRow) string {
		return fmt.Sprintf("%s: work %.3f of the oracle's, P(p99 > 1.10) %.0f %%, median p99 ratio %.2f, median canary %.3f, %.0f s added at or over critical.",
			r.Setting, r.Efficiency, 100*r.POverGoal, r.P99Median, r.CanaryMedian, r.ExtraCritical)
	}
	goal := fmt.Sprintf("P(p99 > 1.10) at most %.0f %%", 100*sim.MaxPOverGoal)
	frontier := ""
	if b, ok := sim.BestOnFrontier(res.Rows, sim.LeastExtraCritical(res.Rows)); ok {
		r := res.Rows[b]
		frontier = fmt.Sprintf(" Most work on the frontier (a median window p99 at most %.2f of a fixed rate's at the run's mean rate) with no more seconds at or over critical than the fewest any adds: %s (frontier %.3f, behind in %.0f %% of runs).",
			sim.FrontierSlack, describe(r), r.Frontier, 100*r.PBehind)
	}
	return searchBestGoal(res, describe, goal) + frontier
}

// searchBestGoal is searchBest's first part: the best setting by the p99
// goal's risk.
func searchBestGoal(res sim.SearchResult, describe func(sim.SearchRow) string, goal string) string {
	if b, ok := sim.Best(res.Rows, 0); ok {
		return fmt.Sprintf("Best with %s and no second added at or over critical: %s", goal, describe(res.Rows[b]))
	}
	least := sim.LeastExtraCritical(res.Rows)
	var s strings.Builder
	if least > 0 {
		// Where the fewest come from: the first row with them, by scenario.
		i := slices.IndexFunc(res.Rows, func(r sim.SearchRow) bool { return r.ExtraCritical == least })
		var where []string
		for k, st := range res.Rows[i].PerScenario {
			if st.ExtraCritical > 0 {
				where = append(where, fmt.Sprintf("%s, %.0f s in %d of its %d runs", res.Spec.Scenarios[k].Name, st.ExtraCritical, st.ExtraCriticalRuns, st.Runs))
			}
		}
		fmt.Fprintf(&s, "No setting adds no second at or over critical: every one adds %.0f s or more over its %d runs (%s for %s). ",
			least, res.Rows[i].Runs, strings.Join(where, "; "), res.Rows[i].Setting)
		if b, ok := sim.Best(res.Rows, least); ok {
			fmt.Fprintf(&s, "Best with %s and no more seconds at or over critical than that: %s", goal, describe(res.Rows[b]))
			return s.String()
		}
	}
	fmt.Fprintf(&s, "No setting has %s with no more seconds at or over critical than the fewest any adds (%.0f s).", goal, least)
	// The least risk among those.
	best := -1
	for i, r := range res.Rows {
		if r.ExtraCritical <= least && (best < 0 || r.POverGoal < res.Rows[best].POverGoal ||
			r.POverGoal == res.Rows[best].POverGoal && r.Efficiency > res.Rows[best].Efficiency) {
			best = i
		}
	}
	if best >= 0 {
		fmt.Fprintf(&s, " The least risk among those that add no more: %s", describe(res.Rows[best]))
	}
	return s.String()
}

var searchSensitivityHead = []string{"canary target", "growth", "breach memory", "canary noise", "work / oracle", "P(p99 > 1.10)", "median p99 ratio", "median canary", "frontier", "P(behind)", "extra s at critical", "runs with extra"}

// searchSensitivityRows are each canary target at the product's growth
// and memory with the canary's noise as fitted (from the grid), halved
// and none.
func searchSensitivityRows(res sim.SearchResult) [][]string {
	var rows [][]string
	for _, c := range res.Spec.CanaryTargets {
		if c == 0 {
			continue
		}
		fitted := sim.Setting{CanaryTarget: c, MaxGrowth: sim.DefaultMaxGrowth, BreachMemory: sim.DefaultBreachMemory}
		var group []sim.SearchRow
		if i := res.Find(fitted); i >= 0 {
			group = append(group, res.Rows[i])
		}
		for _, r := range res.Sensitivity {
			if r.Setting.CanaryTarget == c {
				group = append(group, r)
			}
		}
		for _, r := range group {
			row := searchRow(r)
			rows = append(rows, append(append(row[:3:3], r.Setting.NoiseLabel()), row[3:]...))
		}
	}
	return rows
}

func writeSearchTable(w io.Writer, res sim.SearchResult) {
	table := func(head []string, rows [][]string) { writeTextTable(w, head, rows) }
	spec := res.Spec
	fmt.Fprintf(w, "adaptive over %s; seeds 1-%d\n\n", spec.ScenarioNames(), len(spec.Seeds))
	var all [][]string
	for _, r := range res.Rows {
		all = append(all, searchRow(r))
	}
	table(searchHead, all)
	fmt.Fprintln(w, "\nPareto front (work against P(p99 > 1.10)):")
	fmt.Fprintln(w)
	var front [][]string
	for _, i := range sim.ParetoFront(res.Rows) {
		front = append(front, searchRow(res.Rows[i]))
	}
	table(searchHead, front)
	fmt.Fprintf(w, "\n%s\n\n", searchBest(res))
	table(searchScenarioHead, searchScenarioRows(res))
	if len(res.Sensitivity) > 0 {
		fmt.Fprintln(w, "\nThe canary's noise (a multiple of the fitted spread), at the product's growth and breach memory:")
		fmt.Fprintln(w)
		table(searchSensitivityHead, searchSensitivityRows(res))
	}
}

// writeSearchMarkdown writes the search's generated section.
func writeSearchMarkdown(w io.Writer, res sim.SearchResult) {
	table := func(head []string, text int, rows [][]string) { writeMarkdownTable(w, head, text, rows) }
	spec := res.Spec
	fmt.Fprintf(w, "%d settings (and %d for the noise) over %d scenarios (%s), seeds 1-%d each: %d runs of adaptive, and %d with no job for the critical seconds the foreground spends alone.\n\n",
		len(res.Rows), len(res.Sensitivity), len(spec.Scenarios), spec.ScenarioNames(), len(spec.Seeds),
		(len(res.Rows)+len(res.Sensitivity))*len(spec.Scenarios)*len(spec.Seeds), len(spec.Scenarios)*len(spec.Seeds))
	fmt.Fprintln(w, "The Pareto front of work against P(p99 > 1.10): no other setting does as much work or more at as little risk or less, and more of one.")
	fmt.Fprintln(w)
	var front [][]string
	for _, i := range sim.ParetoFront(res.Rows) {
		front = append(front, searchRow(res.Rows[i]))
	}
	table(searchHead, 3, front)
	fmt.Fprintf(w, "\n%s\n\n", searchBest(res))
	fmt.Fprintln(w, "Per scenario, the best setting (where there is one), the product's defaults with the canary's rule (its noise as fitted, and halved) and without it; x is the jobs' rows over their unpaced rows, as the models read it:")
	fmt.Fprintln(w)
	table(searchScenarioHead, 3, searchScenarioRows(res))
	if len(res.Sensitivity) > 0 {
		fmt.Fprintln(w, "\nThe canary's noise, a multiple of the spread fitted to the replay's pairs, at the product's growth and breach memory:")
		fmt.Fprintln(w)
		table(searchSensitivityHead, 4, searchSensitivityRows(res))
	}
	fmt.Fprintln(w, "\nEvery setting:")
	fmt.Fprintln(w)
	var all [][]string
	for _, r := range res.Rows {
		all = append(all, searchRow(r))
	}
	table(searchHead, 3, all)
}

// writeTextTable writes rows under head as right-aligned columns.
func writeTextTable(w io.Writer, head []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

// writeMarkdownTable writes rows under head as a Markdown table: the
// first text columns left-aligned, the numbers after them right.
func writeMarkdownTable(w io.Writer, head []string, text int, rows [][]string) {
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
