package replay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Markers delimit the replay section of a document (docs/BENCHMARKS.md).
const (
	BeginMarker = "<!-- replay:begin -->"
	EndMarker   = "<!-- replay:end -->"
)

// WriteTables writes one markdown table per scenario.
func (rep *Report) WriteTables(w io.Writer) {
	for _, sc := range rep.Scenarios {
		fmt.Fprintf(w, "### %s\n\n%s.\n\n", sc.Name, capitalise(sc.Description))
		fmt.Fprintln(w, "| policy | fg tps | p50 ms | p99 ms | p99.9 ms | p99 / alone | load > target s | load > critical s | rows cleaned | rows/s | max lag s |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		var oracle *Result
		for i := range rep.Results {
			r := &rep.Results[i]
			if r.Scenario != sc.Name {
				continue
			}
			name := r.Policy
			switch {
			case r.Policy == PolicyAdaptive || r.Policy == PolicyAdaptiveLatency:
				name = "**" + r.Policy + "**"
			case r.Oracle:
				name += " (oracle)"
				oracle = r
			}
			rows := fmt.Sprint(r.Rows)
			if r.Finished {
				rows += " (all)"
			}
			ratio := "-"
			if r.P99VsForeground > 0 {
				ratio = fmt.Sprintf("%.2f", r.P99VsForeground)
			}
			fmt.Fprintf(w, "| %s | %.0f | %.1f | %.1f | %.1f | %s | %.1f | %.1f | %s | %.0f | %.1f |\n", name, r.TPS, ms(r.P50), ms(r.P99),
				ms(r.P999), ratio, r.AboveTarget, r.AboveCritical, rows, r.RowsPerSec, r.MaxLag)
		}
		switch {
		case oracle != nil:
			fmt.Fprintf(w, "\nHindsight oracle: fixed at %g batches/s, the fixed rate that cleaned most with p99 within +%.0f %% of foreground alone.\n",
				oracle.FixedRate, (OracleSlack-1)*100)
		case rep.hasFixed(sc.Name):
			fmt.Fprintf(w, "\nHindsight oracle: none; no fixed rate kept p99 within +%.0f %% of foreground alone.\n", (OracleSlack-1)*100)
		}
		if again := rep.find(sc.Name, PolicyForegroundAgain); again != nil && again.P99VsForeground > 0 {
			fmt.Fprintf(w, "\nNoise: foreground alone, run again after the others, had p99 %.1f ms, %.2f× the first run's: a ratio to foreground alone is only as exact as that.\n",
				ms(again.P99), again.P99VsForeground)
		}
		for _, g := range rep.Goals(sc.Name) {
			fmt.Fprintf(w, "\n%s\n", g)
		}
		for _, r := range rep.Results {
			if r.Scenario == sc.Name && (r.Failed > 0 || r.EventErrors != "") {
				fmt.Fprintf(w, "\n%s: %d foreground transactions failed or could not start", r.Policy, r.Failed)
				if r.EventErrors != "" {
					fmt.Fprintf(w, "; events: %s", r.EventErrors)
				}
				fmt.Fprintln(w, ".")
			}
		}
		fmt.Fprintln(w)
	}
}

// find returns scenario's run under policy, or nil.
func (rep *Report) find(scenario, policy string) *Result {
	for i := range rep.Results {
		if r := &rep.Results[i]; r.Scenario == scenario && r.Policy == policy {
			return r
		}
	}
	return nil
}

// Goal bounds for the adaptive policies, against foreground alone and
// the hindsight oracle in the same scenario.
const (
	// GoalP99 is the most p99 may exceed foreground alone's over the run.
	GoalP99 = OracleSlack
	// GoalRows is the least share of the oracle's rows to clean.
	GoalRows = 0.8
)

// Goal is how one adaptive run in one scenario meets the goals: p99
// within GoalP99 of foreground alone, no second above critical that
// foreground alone did not also spend, and at least GoalRows of the
// hindsight oracle's rows.
type Goal struct {
	Policy                       string
	P99Ratio                     float64
	ExtraCritical                float64 // seconds above critical beyond foreground alone's
	RowsVsOracle                 float64 // NaN without an oracle
	P99Met, CriticalMet, RowsMet bool
}

// Met reports whether every goal is met (rows only where there is an
// oracle to compare with).
func (g Goal) Met() bool {
	return g.P99Met && g.CriticalMet && (g.RowsMet || math.IsNaN(g.RowsVsOracle))
}

func (g Goal) String() string {
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	rows := "no oracle to compare with"
	if !math.IsNaN(g.RowsVsOracle) {
		rows = fmt.Sprintf("%.2f of the oracle's (goal ≥ %.2f): %s", g.RowsVsOracle, GoalRows, yes(g.RowsMet))
	}
	return fmt.Sprintf("Goals for %s: p99 %.2f× foreground alone (goal ≤ %.2f×): %s; %.1f s above critical beyond foreground alone's (goal 0): %s; rows cleaned %s.",
		g.Policy, g.P99Ratio, GoalP99, yes(g.P99Met), g.ExtraCritical, yes(g.CriticalMet), rows)
}

// Goals measures the adaptive runs of scenario against the goals.
func (rep *Report) Goals(scenario string) []Goal {
	var alone, oracle *Result
	for i := range rep.Results {
		r := &rep.Results[i]
		switch {
		case r.Scenario != scenario:
		case r.Policy == PolicyForeground:
			alone = r
		case r.Oracle:
			oracle = r
		}
	}
	if alone == nil {
		return nil
	}
	var out []Goal
	for _, r := range rep.Results {
		if r.Scenario != scenario || (r.Policy != PolicyAdaptive && r.Policy != PolicyAdaptiveLatency) {
			continue
		}
		g := Goal{Policy: r.Policy, P99Ratio: r.P99VsForeground, ExtraCritical: max(0, r.AboveCritical-alone.AboveCritical), RowsVsOracle: math.NaN()}
		g.P99Met = r.P99VsForeground > 0 && r.P99VsForeground <= GoalP99
		g.CriticalMet = g.ExtraCritical == 0
		if oracle != nil && oracle.Rows > 0 {
			g.RowsVsOracle = float64(r.Rows) / float64(oracle.Rows)
			g.RowsMet = g.RowsVsOracle >= GoalRows
		}
		out = append(out, g)
	}
	return out
}

func (rep *Report) hasFixed(scenario string) bool {
	for _, r := range rep.Results {
		if r.Scenario == scenario && r.FixedRate > 0 {
			return true
		}
	}
	return false
}

// WriteCalibration writes the calibration steps as a markdown table.
func (rep *Report) WriteCalibration(w io.Writer) {
	if rep.Calibration == nil {
		fmt.Fprintf(w, "Arrival rate: %.0f transactions/s, given (not calibrated).\n\n", rep.Rate)
		return
	}
	c := rep.Calibration
	fmt.Fprintf(w, "Calibration (foreground alone, rising arrival rates, target mean raw primary_load %.2f): %s; **%.0f transactions/s**.\n\n",
		c.Target, c.Why, c.Rate)
	fmt.Fprintln(w, "| offered tx/s | done tx/s | mean raw load | p99 ms |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|")
	for _, s := range c.Steps {
		fmt.Fprintf(w, "| %.0f | %.0f | %.2f | %.1f |\n", s.Rate, s.TPS, s.Load, ms(s.P99))
	}
	fmt.Fprintln(w)
}

// Section is the document section: how it was made, on what, the
// calibration and every scenario's table.
func (rep *Report) Section(command string) string {
	var b strings.Builder
	fmt.Fprintln(&b, "## Replay: foreground latency while a cleanup runs")
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "Regenerated by `%s`; never edited by hand. Machine: %d cores (%s/%s), PostgreSQL %s (a throwaway primary and streaming replica on the same machine). Runs of %s each; foreground pgbench-like mix (TPC-B-like writes, half read-only), open loop; the cleanup deletes old rows of `%s` through `jobs.DeleteOlderThan`, every run from the same table state. Load and lag are read by an independent sampler; latency is from each transaction's scheduled start. Plots: `out/replay/<scenario>-<policy>.png`.\n\n",
		command, rep.Cores, runtime.GOOS, runtime.GOARCH, rep.PostgreSQL, rep.RunLength.Round(time.Second), EventsTable)
	rep.WriteCalibration(&b)
	rep.WriteTables(&b)
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// ReplaceSection returns doc with the text between BeginMarker and
// EndMarker replaced by body, everything else unchanged. A doc without
// the markers gets them, with body, appended at its end.
func ReplaceSection(doc, body string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	j := strings.Index(doc, EndMarker)
	switch {
	case i < 0 && j < 0:
		sep := ""
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			sep = "\n"
		}
		if doc != "" {
			sep += "\n"
		}
		return doc + sep + BeginMarker + "\n" + body + EndMarker + "\n", nil
	case i < 0 || j < 0 || j < i:
		return "", errors.New("replay: the document has one replay marker without the other, or them out of order")
	case strings.Count(doc, BeginMarker) > 1 || strings.Count(doc, EndMarker) > 1:
		return "", errors.New("replay: the document has more than one replay section")
	}
	return doc[:i+len(BeginMarker)] + "\n" + body + doc[j:], nil
}

// WriteDoc rewrites the replay section of the document at path with
// body, creating the file or the markers when missing.
func WriteDoc(path, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc, err := ReplaceSection(string(old), body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
