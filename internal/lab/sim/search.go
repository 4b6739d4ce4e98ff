package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// search.go: what the canary's target, and the controller's growth and
// breach memory, buy. Adaptive runs with every combination of the
// settings over the scenarios whose replay counterpart was probed, many
// seeds each; each setting is read by the work it does (over the
// oracle's), the chance a run's median p99 ratio is over the 1.10 goal,
// and the seconds above critical it adds to what the foreground alone
// spends there. `throttled sim search` (make sim-search) prints it and
// writes docs/SIMULATION.md's section on it.

// Setting is one point of the search: adaptive's options.
type Setting struct {
	// CanaryTarget is the foreground_latency rule's target; 0 is none.
	CanaryTarget float64
	// MaxGrowth is the controller's largest growth factor a step.
	MaxGrowth float64
	// BreachMemory is how long a breach's budget caps growth.
	BreachMemory time.Duration
	// CanaryNoise scales the canary's fitted noise (Options.CanaryNoise):
	// 0 as fitted, under 0 none.
	CanaryNoise float64
}

// Options are the run options of s.
func (s Setting) Options() Options {
	return Options{CanaryTarget: s.CanaryTarget, MaxGrowth: s.MaxGrowth, BreachMemory: s.BreachMemory, CanaryNoise: s.CanaryNoise}
}

// NoiseLabel is the canary's noise as the tables print it: a multiple of
// the fitted noise.
func (s Setting) NoiseLabel() string {
	switch {
	case s.CanaryNoise < 0:
		return "0"
	case s.CanaryNoise == 0:
		return "1 (fitted)"
	}
	return fmt.Sprintf("%g", s.CanaryNoise)
}

// CanaryLabel is the canary target as the tables print it: "none"
// without the rule.
func (s Setting) CanaryLabel() string {
	if s.CanaryTarget == 0 {
		return "none"
	}
	return fmt.Sprintf("%g", s.CanaryTarget)
}

func (s Setting) String() string {
	str := fmt.Sprintf("canary %s, growth %g, breach memory %s", s.CanaryLabel(), s.MaxGrowth, formatMinutes(s.BreachMemory))
	if s.CanaryNoise != 0 {
		str += ", canary noise x" + s.NoiseLabel()
	}
	return str
}

// formatMinutes reads a whole number of minutes as "10m".
func formatMinutes(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return d.String()
}

// SearchSpec is what a search runs.
type SearchSpec struct {
	Scenarios []Scenario
	Seeds     []uint64
	// CanaryTargets (0 for none), MaxGrowths and BreachMemories are
	// crossed: every combination is a setting.
	CanaryTargets  []float64
	MaxGrowths     []float64
	BreachMemories []time.Duration
	// Sensitivity are more settings, run and reported apart from the
	// grid's (no front, no best): the canary's noise scaled.
	Sensitivity []Setting
	// Workers is how many runs go at once; the result does not depend on
	// it. 0 is 1.
	Workers int
}

// Product's defaults among the search's values: the canary's rule as
// throttled.Open adds it, and the controller's growth and memory.
const (
	DefaultMaxGrowth    = 1.25
	DefaultBreachMemory = 10 * time.Minute
)

// DefaultSearchSpec is make sim-search's: the canary's target at 1.02,
// 1.05, 1.1 (the product's), 1.2 and none; the growth factor at 1.1,
// 1.25 (the product's) and 1.5; the breach memory at 1 and 10 minutes
// (the product's; 30 read as 10 did: only diurnal outlasts 10); over
// SearchScenarios, with seeds 1 to seeds. The sensitivity runs each
// canary target at the product's growth and memory with the canary's
// noise halved and with none: how much of what the canary costs is its
// noise.
func DefaultSearchSpec(seeds int) SearchSpec {
	s := SearchSpec{
		Scenarios:      SearchScenarios(),
		CanaryTargets:  []float64{1.02, 1.05, 1.1, 1.2, 0},
		MaxGrowths:     []float64{1.1, DefaultMaxGrowth, 1.5},
		BreachMemories: []time.Duration{time.Minute, DefaultBreachMemory},
	}
	for _, c := range s.CanaryTargets {
		if c == 0 {
			continue
		}
		for _, n := range []float64{0.5, -1} {
			s.Sensitivity = append(s.Sensitivity, Setting{CanaryTarget: c, MaxGrowth: DefaultMaxGrowth, BreachMemory: DefaultBreachMemory, CanaryNoise: n})
		}
	}
	for i := range seeds {
		s.Seeds = append(s.Seeds, uint64(i+1))
	}
	return s
}

// probed are the replay scenarios with a probe block: those a canary
// model was fitted to.
var probed = []string{"quiet", "surge", "write-heavy", "cpu-hog"}

// SearchScenarios are the simulated scenarios whose counterpart the
// replay probed (surge, cpu-hog, write-heavy), in Scenarios' order, and
// steady-quiet: steady with quiet's models, as quiet is no scenario's
// counterpart (the search needs one to see quiet's canary, which barely
// moves).
func SearchScenarios() []Scenario {
	var out []Scenario
	for _, sc := range Scenarios() {
		if slices.Contains(probed, sc.Counterpart) {
			out = append(out, sc)
		}
	}
	if sc, ok := ScenarioNamed("steady"); ok {
		sc.Name, sc.Counterpart = "steady-quiet", "quiet"
		sc.Description += "; the replay's quiet as its counterpart (its p99 and canary models)"
		out = append(out, sc)
	}
	return out
}

// Settings are spec's settings, the canary target varying slowest.
func (spec SearchSpec) Settings() []Setting {
	var out []Setting
	for _, c := range spec.CanaryTargets {
		for _, g := range spec.MaxGrowths {
			for _, m := range spec.BreachMemories {
				out = append(out, Setting{CanaryTarget: c, MaxGrowth: g, BreachMemory: m})
			}
		}
	}
	return out
}

// ScenarioStats is one setting's measures over some runs.
type ScenarioStats struct {
	Runs int
	// Efficiency is the runs' mean work over the oracle's.
	Efficiency float64
	// POverGoal is the share of runs whose median p99 ratio
	// (Result.P99RatioMedian) is over P99Goal.
	POverGoal float64
	// P99Median is the median over the runs of their median p99 ratio;
	// CanaryMedian the same of the canary's raw ratio.
	P99Median, CanaryMedian float64
	// X is the runs' mean rows/s over the jobs' unpaced rows/s: x as the
	// latency and canary models read it, over the whole run.
	X float64
	// ExtraCritical is the seconds at or over critical the runs spent
	// beyond the foreground alone's (the same scenario and seed with no
	// job), summed over the runs; ExtraCriticalRuns the runs with any.
	ExtraCritical     float64
	ExtraCriticalRuns int
	// Frontier is the median over the runs of the run's window p99
	// (Result.WindowP99Median) over that of a fixed rate at the run's
	// mean rate on the same seed: at or under 1, the setting is on the
	// fixed-rate curve or beyond it, as the replay's frontier verdict
	// asks. PBehind is the share of runs over FrontierSlack.
	Frontier, PBehind float64
}

// FrontierSlack is how far over a fixed rate's window p99 a run may read
// and still count as on the frontier: the replay's verdicts decide at a
// resolution of about this.
const FrontierSlack = 1.02

// SearchRow is one setting's result: over every run, and per scenario.
type SearchRow struct {
	Setting Setting
	ScenarioStats
	PerScenario []ScenarioStats // in the spec's scenarios' order
}

// SearchResult is a search's rows, in the spec's settings' order.
type SearchResult struct {
	Spec SearchSpec
	Rows []SearchRow
	// Sensitivity are the spec's Sensitivity settings' rows.
	Sensitivity []SearchRow
	// Took is the search's wall time.
	Took time.Duration
}

// Search runs spec. progress, if not nil, is told each setting done.
func Search(spec SearchSpec, progress func(done, total int)) (SearchResult, error) {
	start := time.Now()
	grid := spec.Settings()
	settings := append(slices.Clone(grid), spec.Sensitivity...)
	if len(grid) == 0 || len(spec.Scenarios) == 0 || len(spec.Seeds) == 0 {
		return SearchResult{}, fmt.Errorf("sim: search: nothing to run (%d settings, %d scenarios, %d seeds)", len(grid), len(spec.Scenarios), len(spec.Seeds))
	}
	for _, s := range settings {
		if err := s.Options().check(); err != nil {
			return SearchResult{}, err
		}
	}
	nSc, nSeed := len(spec.Scenarios), len(spec.Seeds)
	// The foreground alone's seconds at or over critical, per scenario
	// and seed.
	alone := make([]float64, nSc*nSeed)
	// Each setting's results, [setting][scenario][seed].
	results := make([]Result, len(settings)*nSc*nSeed)
	// Each run's window p99 over a fixed rate's at its mean rate.
	frontier := make([]float64, len(settings)*nSc*nSeed)
	type job struct{ setting, scenario, seed int } // setting -1: alone
	jobs := make(chan job)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		left     = make([]int, len(settings))
		done     int
	)
	for i := range left {
		left[i] = nSc * nSeed
	}
	workers := max(spec.Workers, 1)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				sc, seed := spec.Scenarios[j.scenario], spec.Seeds[j.seed]
				if j.setting < 0 {
					r, err := run(sc, "fixed", 0, seed, Options{})
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					alone[j.scenario*nSeed+j.seed] = r.TimeAboveCritical
					mu.Unlock()
					continue
				}
				r, err := run(sc, "adaptive", 0, seed, settings[j.setting].Options())
				r.Series = nil
				// The frontier: a fixed rate at the run's mean rate, on
				// the same seed (the same latency noise, tick by tick).
				fr := 1.0
				if err == nil && r.Work > 0 {
					f, ferr := run(sc, "fixed", r.Work/(float64(sc.Duration)*tickSeconds), seed, Options{})
					err = ferr
					if f.WindowP99Median > 0 {
						fr = r.WindowP99Median / f.WindowP99Median
					}
				}
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				results[(j.setting*nSc+j.scenario)*nSeed+j.seed] = r
				frontier[(j.setting*nSc+j.scenario)*nSeed+j.seed] = fr
				left[j.setting]--
				if left[j.setting] == 0 {
					done++
					if progress != nil {
						progress(done, len(settings))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for sc := range nSc {
		for sd := range nSeed {
			jobs <- job{-1, sc, sd}
		}
	}
	for st := range settings {
		for sc := range nSc {
			for sd := range nSeed {
				jobs <- job{st, sc, sd}
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return SearchResult{}, firstErr
	}
	res := SearchResult{Spec: spec}
	for st, s := range settings {
		row := SearchRow{Setting: s}
		var all []Result
		var allAlone, allFrontier []float64
		for sc := range nSc {
			lo, hi := (st*nSc+sc)*nSeed, (st*nSc+sc+1)*nSeed
			rs, fr := results[lo:hi], frontier[lo:hi]
			al := alone[sc*nSeed : (sc+1)*nSeed]
			row.PerScenario = append(row.PerScenario, summarise(rs, al, fr, spec.Scenarios[sc].Duration))
			all, allAlone, allFrontier = append(all, rs...), append(allAlone, al...), append(allFrontier, fr...)
		}
		row.ScenarioStats = summarise(all, allAlone, allFrontier, 0)
		if st < len(grid) {
			res.Rows = append(res.Rows, row)
		} else {
			res.Sensitivity = append(res.Sensitivity, row)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// summarise reads runs, with the foreground alone's seconds at or over
// critical in the same scenario and seed beside each, and each run's
// window p99 over the frontier's; duration is their scenario's ticks,
// for X (0 for runs of several scenarios: X is 0).
func summarise(rs []Result, alone, frontier []float64, duration int) ScenarioStats {
	st := ScenarioStats{Runs: len(rs)}
	if len(rs) == 0 {
		return st
	}
	var p99s, canaries []float64
	over := 0
	for i, r := range rs {
		st.Efficiency += r.Efficiency
		if r.P99RatioMedian > P99Goal {
			over++
		}
		if extra := r.TimeAboveCritical - alone[i]; extra > 0 {
			st.ExtraCritical += extra
			st.ExtraCriticalRuns++
		}
		p99s, canaries = append(p99s, r.P99RatioMedian), append(canaries, r.CanaryRatioMedian)
		if duration > 0 {
			st.X += r.Work / (float64(duration) * tickSeconds) / maxBudget
		}
	}
	st.Efficiency /= float64(len(rs))
	st.X /= float64(len(rs))
	st.POverGoal = float64(over) / float64(len(rs))
	st.P99Median, _ = p99Summary(p99s)
	st.CanaryMedian, _ = p99Summary(canaries)
	st.Frontier, _ = p99Summary(frontier)
	behind := 0
	for _, f := range frontier {
		if f > FrontierSlack {
			behind++
		}
	}
	if len(frontier) > 0 {
		st.PBehind = float64(behind) / float64(len(frontier))
	}
	return st
}

// ParetoFront is the indices of the rows no other row dominates on work
// (Efficiency, more is better) and the p99 goal's risk (POverGoal, less
// is better): none has at least as much work and at most as much risk,
// and more work or less risk. Rows equal on both are all kept. Sorted by
// risk, then work, then index.
func ParetoFront(rows []SearchRow) []int {
	var front []int
	for i, a := range rows {
		dominated := false
		for j, b := range rows {
			if i != j && b.Efficiency >= a.Efficiency && b.POverGoal <= a.POverGoal &&
				(b.Efficiency > a.Efficiency || b.POverGoal < a.POverGoal) {
				dominated = true
				break
			}
		}
		if !dominated {
			front = append(front, i)
		}
	}
	slices.SortStableFunc(front, func(i, j int) int {
		return cmp.Or(cmp.Compare(rows[i].POverGoal, rows[j].POverGoal), cmp.Compare(rows[j].Efficiency, rows[i].Efficiency), cmp.Compare(i, j))
	})
	return front
}

// Constraints of the best setting.
const (
	// MaxPOverGoal is the most a setting's runs may have their median p99
	// ratio over the goal.
	MaxPOverGoal = 0.10
)

// Best is the index of the row with the most work among those with
// POverGoal at most MaxPOverGoal and at most maxExtra seconds at or over
// critical beyond the foreground alone's (0: none); ok is false where
// none qualifies. Ties go to the earlier row.
func Best(rows []SearchRow, maxExtra float64) (int, bool) {
	return mostWork(rows, func(r SearchRow) bool { return r.POverGoal <= MaxPOverGoal && r.ExtraCritical <= maxExtra })
}

// BestOnFrontier is the index of the row with the most work among those
// on the frontier (Frontier at most FrontierSlack) with at most maxExtra
// seconds at or over critical beyond the foreground alone's; ok is false
// where none qualifies. Ties go to the earlier row.
func BestOnFrontier(rows []SearchRow, maxExtra float64) (int, bool) {
	return mostWork(rows, func(r SearchRow) bool { return r.Frontier <= FrontierSlack && r.ExtraCritical <= maxExtra })
}

// mostWork is the index of the row with the most work among those that
// qualify; ok is false where none does. Ties go to the earlier row.
func mostWork(rows []SearchRow, qualifies func(SearchRow) bool) (int, bool) {
	best := -1
	for i, r := range rows {
		if qualifies(r) && (best < 0 || r.Efficiency > rows[best].Efficiency) {
			best = i
		}
	}
	return best, best >= 0
}

// LeastExtraCritical is the fewest seconds at or over critical beyond
// the foreground alone's that any row adds: where it is over 0, no
// setting adds none, and the seconds are the scenario's, not a setting's.
func LeastExtraCritical(rows []SearchRow) float64 {
	if len(rows) == 0 {
		return 0
	}
	least := rows[0].ExtraCritical
	for _, r := range rows[1:] {
		least = min(least, r.ExtraCritical)
	}
	return least
}

// Find is the index of the row with setting s; -1 where none.
func (res SearchResult) Find(s Setting) int {
	return slices.IndexFunc(res.Rows, func(r SearchRow) bool { return r.Setting == s })
}

// ScenarioNames are the spec's scenarios' names, joined.
func (spec SearchSpec) ScenarioNames() string {
	var names []string
	for _, sc := range spec.Scenarios {
		names = append(names, sc.Name)
	}
	return strings.Join(names, ", ")
}
