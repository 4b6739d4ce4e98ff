package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/throttled/throttled/internal/sim"
)

func newSimCmd() *cobra.Command {
	var o simOptions
	cmd := &cobra.Command{
		Use:     "sim",
		Short:   "compare pacing policies on simulated scenarios",
		Long:    "Compares pacing policies on simulated scenarios: the controller, unchanged, against a modelled primary and replica. Deterministic: the same seed gives the same results.",
		Example: "  throttled sim --scenario all --markdown\n  throttled sim --scenario step --policy adaptive --json",
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
	fmt.Fprintln(w, "| scenario | policy | above target s | above critical s | first cut s | efficiency | reversals/10 min | work while paused |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		cut := "-"
		if r.FirstCut != nil {
			cut = fmt.Sprintf("%.0f", *r.FirstCut)
		}
		policy := r.Policy
		if policy == "adaptive" {
			policy = "**adaptive**"
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %s | %.2f | %.1f | %.0f |\n", r.Scenario, policy, r.TimeAboveTarget,
			r.TimeAboveCritical, cut, r.Efficiency, r.ReversalsPer10Min, r.WorkWhilePaused)
	}
}

func writeSimTable(w io.Writer, results []sim.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpolicy\tabove target s\tabove critical s\tfirst cut s\tefficiency\treversals/10min\twork while paused\t")
	for _, r := range results {
		cut := "-"
		if r.FirstCut != nil {
			cut = fmt.Sprintf("%.0f", *r.FirstCut)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%.2f\t%.1f\t%.0f\t\n", r.Scenario, r.Policy, r.TimeAboveTarget,
			r.TimeAboveCritical, cut, r.Efficiency, r.ReversalsPer10Min, r.WorkWhilePaused)
	}
	tw.Flush()
}
