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

	"github.com/throttled/throttled/throttle"
)

// Markers delimit the replay section of a document (docs/BENCHMARKS.md).
const (
	BeginMarker = "<!-- replay:begin -->"
	EndMarker   = "<!-- replay:end -->"
)

// WriteTables writes one markdown table per scenario: each policy's
// medians over the repetitions.
func (rep *Report) WriteTables(w io.Writer) {
	for _, sc := range rep.Scenarios {
		fmt.Fprintf(w, "### %s\n\n%s.\n\n", sc.Name, capitalise(sc.Description))
		fmt.Fprintln(w, "| policy | runs | fg tps | p50 ms | p99 ms | p99 range ms | p99.9 ms | p99 / alone | load > target s | load > critical s | rows cleaned | rows/s | max lag s | max steal % |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		var oracle, alone *Summary
		for i := range rep.Summaries {
			s := &rep.Summaries[i]
			if s.Scenario != sc.Name {
				continue
			}
			name := s.Policy
			switch {
			case s.Policy == PolicyAdaptive || s.Policy == PolicyAdaptiveLoad:
				name = "**" + s.Policy + "**"
			case s.Oracle:
				name += " (oracle)"
				oracle = s
			case s.Policy == PolicyForeground:
				alone = s
			}
			rows := fmt.Sprint(s.Rows)
			if s.Finished {
				rows += " (all)"
			}
			ratio := "-"
			if s.P99VsForeground > 0 {
				ratio = fmt.Sprintf("%.2f", s.P99VsForeground)
			}
			steal := stealText(s.StealMax)
			if s.Disturbed > 0 {
				steal += fmt.Sprintf(" (%d kept over)", s.Disturbed)
			}
			if s.LeftOut > 0 {
				steal += fmt.Sprintf(" (%d over, left out)", s.LeftOut)
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.1f | %.1f | %.1f–%.1f | %.1f | %s | %.1f | %.1f | %s | %.0f | %.1f | %s |\n", name, s.Runs, s.TPS, ms(s.P50), ms(s.P99),
				ms(s.P99Min), ms(s.P99Max), ms(s.P999), ratio, s.AboveTarget, s.AboveCritical, rows, s.RowsPerSec, s.MaxLag, steal)
		}
		switch {
		case oracle != nil:
			fmt.Fprintf(w, "\nHindsight oracle: fixed at %g batches/s, the fixed rate that cleaned most with its median p99 within +%.0f %% of foreground alone's.\n",
				oracle.FixedRate, (OracleSlack-1)*100)
		case rep.hasFixed(sc.Name):
			fmt.Fprintf(w, "\nHindsight oracle: none; no fixed rate kept its median p99 within +%.0f %% of foreground alone's.\n", (OracleSlack-1)*100)
		}
		if alone != nil && alone.Runs > 1 && alone.P99 > 0 {
			fmt.Fprintf(w, "\nNoise: foreground alone, run %d times, had p99 from %.1f to %.1f ms (median %.1f): one run strays from the median by up to %+.0f %% / %+.0f %%, which is why every row is a median.\n",
				alone.Runs, ms(alone.P99Min), ms(alone.P99Max), ms(alone.P99), 100*(float64(alone.P99Min)/float64(alone.P99)-1), 100*(float64(alone.P99Max)/float64(alone.P99)-1))
		}
		for _, g := range rep.Goals(sc.Name) {
			fmt.Fprintf(w, "\n%s\n", g)
		}
		rep.writeDiscarded(w, sc.Name)
		for _, s := range rep.Summaries {
			if s.Scenario == sc.Name && (s.Failed > 0 || s.EventErrors != "") {
				fmt.Fprintf(w, "\n%s: %d foreground transactions failed or could not start", s.Policy, s.Failed)
				if s.EventErrors != "" {
					fmt.Fprintf(w, "; events: %s", s.EventErrors)
				}
				fmt.Fprintln(w, ".")
			}
		}
		fmt.Fprintln(w)
	}
}

// stealPolicy says what a run disturbed by steal met.
func stealPolicy(maxSteal float64, reruns int) string {
	if maxSteal < 0 || reruns <= 0 {
		return "; every run was kept whatever its steal"
	}
	return fmt.Sprintf("; a run over %s %% was discarded and run again, at most %d times (--max-steal, --reruns), and one still over it after those counts in its row only where the row has no run under it (\"kept over\"; \"over, left out\" where it does)", stealText(maxSteal), reruns)
}

// writeDiscarded lists the scenario's runs discarded for steal.
func (rep *Report) writeDiscarded(w io.Writer, scenario string) {
	var runs []string
	for _, r := range rep.Discarded {
		if r.Scenario == scenario {
			runs = append(runs, fmt.Sprintf("%s %d/%d (steal %s %%, p99 %.1f ms)", r.Policy, r.Rep, rep.Repeat, stealText(r.Steal), ms(r.P99)))
		}
	}
	if len(runs) > 0 {
		fmt.Fprintf(w, "\nRun again because the hypervisor took more than %s %% of the CPU time the machine wanted (steal): %s.\n", stealText(rep.MaxSteal), strings.Join(runs, "; "))
	}
}

// Goal bounds for the adaptive policies, against foreground alone and
// the hindsight oracle in the same scenario.
const (
	// GoalP99 is the most p99 may exceed foreground alone's over the run.
	GoalP99 = OracleSlack
	// GoalRows is the least share of the oracle's rows to clean.
	GoalRows = 0.8
)

// Goal is how one adaptive policy in one scenario meets the goals, on
// the medians over the repetitions: p99 within GoalP99 of foreground
// alone, no second above critical that foreground alone did not also
// spend, and at least GoalRows of the hindsight oracle's rows.
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

// Goals measures the adaptive policies of scenario against the goals.
func (rep *Report) Goals(scenario string) []Goal {
	var alone, oracle *Summary
	for i := range rep.Summaries {
		s := &rep.Summaries[i]
		switch {
		case s.Scenario != scenario:
		case s.Policy == PolicyForeground:
			alone = s
		case s.Oracle:
			oracle = s
		}
	}
	if alone == nil {
		return nil
	}
	var out []Goal
	for _, s := range rep.Summaries {
		if s.Scenario != scenario || (s.Policy != PolicyAdaptive && s.Policy != PolicyAdaptiveLoad) {
			continue
		}
		g := Goal{Policy: s.Policy, P99Ratio: s.P99VsForeground, ExtraCritical: max(0, s.AboveCritical-alone.AboveCritical), RowsVsOracle: math.NaN()}
		g.P99Met = s.P99VsForeground > 0 && s.P99VsForeground <= GoalP99
		g.CriticalMet = g.ExtraCritical == 0
		if oracle != nil && oracle.Rows > 0 {
			g.RowsVsOracle = float64(s.Rows) / float64(oracle.Rows)
			g.RowsMet = g.RowsVsOracle >= GoalRows
		}
		out = append(out, g)
	}
	return out
}

func (rep *Report) hasFixed(scenario string) bool {
	for _, s := range rep.Summaries {
		if s.Scenario == scenario && s.FixedRate > 0 {
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
	fmt.Fprintln(w, "| ramp | offered tx/s | done tx/s | mean raw load | p99 ms | steal % |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	for _, s := range c.Steps {
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.2f | %.1f | %s |\n", s.Ramp, s.Rate, s.TPS, s.Load, ms(s.P99), stealText(s.Steal))
	}
	fmt.Fprintln(w)
}

// repetitions says how often every scenario ran.
func repetitions(n int) string {
	if n <= 1 {
		return "Every scenario ran once (--repeat 1)."
	}
	return fmt.Sprintf("Every scenario's runs are repeated %d times, every other repetition in the reverse order.", n)
}

// targetNote names adaptive's foreground-latency target when it is not
// the default.
func targetNote(target float64) string {
	if target == 0 || target == throttle.DefaultForegroundLatencyRule.Target {
		return fmt.Sprintf(" (the foreground-latency canary on, target %g)", throttle.DefaultForegroundLatencyRule.Target)
	}
	return fmt.Sprintf(" but for its foreground-latency target, %g (--foreground-target) instead of %g", target, throttle.DefaultForegroundLatencyRule.Target)
}

// heldNote says when adaptive's canary measured its baseline with the
// jobs held, which the product does not by default.
func heldNote(held bool) string {
	if !held {
		return ""
	}
	return ", and with the canary's baseline measured only while the jobs are held (--held-baseline), not the default"
}

// Section is the document section: how it was made, on what, the
// calibration and every scenario's table.
func (rep *Report) Section(command string) string {
	var b strings.Builder
	fmt.Fprintln(&b, "## Replay: foreground latency while a cleanup runs")
	fmt.Fprintln(&b)
	run := fmt.Sprintf("`%s`", command)
	if rep.Rendered != "" {
		run += fmt.Sprintf(", its tables rendered again from its results.json by `%s`", rep.Rendered)
	}
	fmt.Fprintf(&b, "Regenerated by %s; never edited by hand. Machine: %d cores (%s/%s), PostgreSQL %s (a throwaway primary and streaming replica on the same machine). Runs of %s each, after %s of the foreground alone with the policy's sampler already up (as a sidecar's would be before a job starts); foreground pgbench-like mix (TPC-B-like writes, half read-only), open loop; the cleanup deletes old rows of `%s` through `jobs.DeleteOlderThan`, every run from the same table state. %s Each row is the policy's median over its runs, and p99 / alone is its median p99 over the median p99 of the foreground alone's runs (those it counts, see max steal). adaptive is the product's defaults%s; adaptive-load is the same without the canary. Load and lag are read by an independent sampler; latency is from each transaction's scheduled start. Max steal is the largest share, over the runs a row counts, of the CPU time the machine wanted that the hypervisor gave to other guests (/proc/stat)%s. Plots: `out/replay/<scenario>-<policy>.png`, the run nearest the median p99.\n\n",
		run, rep.Cores, runtime.GOOS, runtime.GOARCH, rep.PostgreSQL, rep.RunLength.Round(time.Second), rep.Warmup.Round(time.Second), EventsTable, repetitions(rep.Repeat), targetNote(rep.ForegroundTarget)+heldNote(rep.HeldBaseline), stealPolicy(rep.MaxSteal, rep.Reruns))
	if len(rep.StalePlots) > 0 {
		fmt.Fprintf(&b, "Rendered again, these rows left out the run their plot shows, and their own was not plotted: %s.\n\n", strings.Join(rep.StalePlots, ", "))
	}
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
