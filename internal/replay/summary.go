package replay

import (
	"cmp"
	"slices"
	"time"
)

// Summary is one policy in one scenario over every repetition: the median
// of each measure over its runs, and the spread of p99. Foreground alone
// and foreground-again are one summary, PolicyForeground: every run of
// the foreground alone is a reading of the same thing, and together they
// are the baseline each ratio is taken against.
type Summary struct {
	Scenario, Policy string
	// FixedRate is the fixed policy's rate, batches per second.
	FixedRate float64 `json:",omitempty"`
	// Runs is how many runs the medians are over.
	Runs int
	// Medians over the runs.
	TPS                        float64
	P50, P99, P999             time.Duration
	AboveTarget, AboveCritical float64
	Rows                       int64
	RowsPerSec                 float64
	// P99Min and P99Max are the least and the greatest p99 of the runs:
	// how far one run may stray.
	P99Min, P99Max time.Duration
	// P99VsForeground is the median p99 over the median p99 of every run
	// of the foreground alone in the scenario; 0 without one.
	P99VsForeground float64
	// MaxLag is the largest replica lag any run saw, seconds.
	MaxLag float64
	// Failed is the foreground transactions that failed or could not
	// start, over every run.
	Failed int64
	// Finished says a run cleaned every old row before it ended.
	Finished bool
	// StealMax is the largest steal share of the runs counted
	// (Result.Steal; -1 when unknown); Disturbed counts the runs counted
	// that were kept with a steal over Config.MaxSteal. LeftOut counts
	// the runs kept over it that the medians leave out: a row with a run
	// under the limit counts only those (see summarize).
	StealMax  float64
	Disturbed int
	LeftOut   int
	// Oracle marks the hindsight oracle among the fixed rates.
	Oracle bool
	// Plot is the PNG of the run whose p99 is the median's.
	Plot string `json:",omitempty"`
	// EventErrors are the errors any run's events met.
	EventErrors string `json:",omitempty"`

	median int // index in the results of the run closest to the median p99
}

// summaryPolicy is the summary a run counts in: foreground-again runs
// count with foreground alone's.
func summaryPolicy(policy string) string {
	if policy == PolicyForegroundAgain {
		return PolicyForeground
	}
	return policy
}

// summarize groups results by scenario and policy, in the order each
// first ran, takes the medians, the ratios to foreground alone and marks
// the hindsight oracle: the fixed rate that cleaned the most rows (median)
// with its median p99 within OracleSlack of foreground alone's. It also
// fills each run's own ratio to that baseline.
//
// A run kept with a steal over the limit (Result.Disturbed: its re-runs
// were used up) counts only in a row with no run under the limit. Where
// the row has one, the medians are over the quiet runs and the disturbed
// ones are left out (Summary.LeftOut): with the foreground alone's two
// runs, counting a disturbed one makes the baseline the mean of a quiet
// and a disturbed p99, which loosens every ratio of the scenario and the
// oracle with them.
func summarize(results []Result) []Summary {
	type key struct{ scenario, policy string }
	var order []key
	runs := map[key][]int{}
	for i, r := range results {
		k := key{r.Scenario, summaryPolicy(r.Policy)}
		if _, ok := runs[k]; !ok {
			order = append(order, k)
		}
		runs[k] = append(runs[k], i)
	}
	out := make([]Summary, 0, len(order))
	alone := map[string]time.Duration{}
	for _, k := range order {
		idx := runs[k]
		quiet := slices.DeleteFunc(slices.Clone(idx), func(i int) bool { return results[i].Disturbed })
		if len(quiet) == 0 {
			quiet = idx
		}
		s := summary(results, quiet)
		s.Scenario, s.Policy, s.LeftOut = k.scenario, k.policy, len(idx)-len(quiet)
		if k.policy == PolicyForeground {
			alone[k.scenario] = s.P99
		}
		out = append(out, s)
	}
	for i := range results {
		if base := alone[results[i].Scenario]; base > 0 {
			results[i].P99VsForeground = float64(results[i].P99) / float64(base)
		}
	}
	best := map[string]int{}
	for i := range out {
		s := &out[i]
		base := alone[s.Scenario]
		if base == 0 {
			continue
		}
		s.P99VsForeground = float64(s.P99) / float64(base)
		if s.FixedRate > 0 && s.P99VsForeground <= OracleSlack {
			if j, ok := best[s.Scenario]; !ok || s.Rows > out[j].Rows {
				best[s.Scenario] = i
			}
		}
	}
	for _, i := range best {
		out[i].Oracle = true
	}
	return out
}

// summary takes the medians of the runs at idx.
func summary(results []Result, idx []int) Summary {
	first := results[idx[0]]
	s := Summary{FixedRate: first.FixedRate, Runs: len(idx), P99Min: first.P99, P99Max: first.P99, StealMax: first.Steal}
	var tps, target, critical, perSec []float64
	var p50, p99, p999 []time.Duration
	var rows []int64
	for _, i := range idx {
		r := results[i]
		tps, target, critical, perSec = append(tps, r.TPS), append(target, r.AboveTarget), append(critical, r.AboveCritical), append(perSec, r.RowsPerSec)
		p50, p99, p999, rows = append(p50, r.P50), append(p99, r.P99), append(p999, r.P999), append(rows, r.Rows)
		s.P99Min, s.P99Max = min(s.P99Min, r.P99), max(s.P99Max, r.P99)
		s.MaxLag = max(s.MaxLag, r.MaxLag)
		s.Failed += r.Failed
		s.Finished = s.Finished || r.Finished
		s.StealMax = max(s.StealMax, r.Steal)
		if r.Disturbed {
			s.Disturbed++
		}
		if r.EventErrors != "" && s.EventErrors == "" {
			s.EventErrors = r.EventErrors
		}
	}
	s.TPS, s.AboveTarget, s.AboveCritical, s.RowsPerSec = median(tps), median(target), median(critical), median(perSec)
	s.P50, s.P99, s.P999, s.Rows = median(p50), median(p99), median(p999), median(rows)
	// The plot shown is the run nearest the median p99.
	s.median = idx[0]
	for _, i := range idx {
		if absDiff(results[i].P99, s.P99) < absDiff(results[s.median].P99, s.P99) {
			s.median = i
		}
	}
	s.Plot = results[s.median].Plot
	return s
}

// median is the middle of xs, or the mean of the middle two; the zero
// value for none.
func median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.SortFunc(s, cmp.Compare)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}
