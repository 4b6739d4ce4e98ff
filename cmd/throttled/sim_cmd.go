package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/throttled/throttled/internal/sim"
)

func runSim(ctx context.Context, args []string, out, errOut io.Writer) int {
	var scenario, policy, plotDir string
	var seed uint64
	var asJSON, asMarkdown bool
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.StringVar(&scenario, "scenario", "all", "scenario to run, or all")
	fs.StringVar(&policy, "policy", "all", "policy to run ("+strings.Join(sim.PolicyNames, ", ")+"), or all")
	fs.Uint64Var(&seed, "seed", 1, "random seed; the same seed gives the same results")
	fs.BoolVar(&asJSON, "json", false, "print one JSON array of results")
	fs.BoolVar(&asMarkdown, "markdown", false, "print the table as Markdown (as in docs/SIMULATION.md)")
	fs.StringVar(&plotDir, "plot", "", "write one PNG per scenario (load, rate and oracle over time) into this directory")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "sim", err)
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
			return fail(errOut, "sim", fmt.Errorf("%w: unknown scenario %q; want one of %s, or all", errUsage, scenario, strings.Join(names, ", ")))
		}
		scenarios = []sim.Scenario{sc}
	}
	policies := sim.PolicyNames
	if policy != "all" {
		if !slices.Contains(sim.PolicyNames, policy) {
			return fail(errOut, "sim", fmt.Errorf("%w: unknown policy %q; want one of %s, or all", errUsage, policy, strings.Join(sim.PolicyNames, ", ")))
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
