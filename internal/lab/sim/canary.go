package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/throttled/throttled/signals"
)

// canary.go: the product's foreground-latency canary in the plant. The
// product times a one-row commit every 50 ms and reads the mean latency
// of the last two seconds of them over a job-free baseline, smoothed
// (signals.ForegroundLatency). The replay's probe blocks
// (docs/replay/probe) ran the same statement as an instrument under every
// window, and `throttled sim fit` fits, per probe scenario, the canary's
// ratio (the mean probe latency of a policy window over that of the
// foreground alone next to it) against x, the job's rows/s over its
// unthrottled rows/s, as the p99 ratio is fitted:
//
//	canary(x) = 1 + c·x^d,   c >= 0, d > 0,
//
// with the spread of ln ratio around it. The windows are two seconds,
// the product's span, so each tick's raw reading is the curve times that
// spread. With no job at work the product's ratio is 1 exactly (every
// probe of the span is job-free: the baseline is the mean), so a tick in
// which the jobs did no work reads 1, without noise.

// CanaryForm is the canary model's form, as plantfit.json names it.
const CanaryForm = "canary(x) = 1 + c*x^d; the instrument canary's mean commit latency in a policy window over its alone neighbours', x as the p99 model's; ln canary ~ ln canary(x) + N(0, residual_sd); p99_a, p99_b: the p99 ratio fitted to the same pairs; p99_goal_x: where that reaches 1.10; canary_at_p99_goal: canary(p99_goal_x)"

// canaryTau is the canary ratio's EWMA time constant in seconds: the
// sampler's smoothing (signals.Config.Smoothing, by default
// signals.DefaultSmoothing), the same as primary_load's.
var canaryTau = signals.DefaultSmoothing.Seconds()

// CanaryModel is one probe scenario's fitted canary ratio against the
// job's rows per second.
type CanaryModel struct {
	// Scenario is the replay scenario (docs/replay/probe/<scenario>.json).
	Scenario string `json:"scenario"`
	// Points is the pairs fitted, the a/a ones at x = 0.
	Points int `json:"points"`
	// UnthrottledRowsPerSec is the median rows/s of the probe block's
	// unthrottled windows: x = 1.
	UnthrottledRowsPerSec float64 `json:"unthrottled_rows_per_s"`
	// C and D are the curve's constants.
	C float64 `json:"c"`
	D float64 `json:"d"`
	// ResidualSD and Outliers are read as LatencyModel's are.
	ResidualSD float64 `json:"residual_sd"`
	Outliers   int     `json:"outliers"`
	// P99A and P99B are the foreground's p99 ratio fitted to the same
	// pairs (1 + a·x^b); GoalX is the x at which that reaches P99Goal (0
	// where it is flat), and AtGoal the canary's median there: the
	// canary reading that corresponds to the p99 goal.
	P99A   float64 `json:"p99_a"`
	P99B   float64 `json:"p99_b"`
	GoalX  float64 `json:"p99_goal_x"`
	AtGoal float64 `json:"canary_at_p99_goal"`
}

// Ratio is the model's median canary ratio at x: 1 at x <= 0,
// non-decreasing.
func (m CanaryModel) Ratio(x float64) float64 { return powerCurve(m.C, m.D, x) }

// check reports the first constant that would make the model something
// other than a non-decreasing curve from 1.
func (m CanaryModel) check() error {
	if m.Scenario == "" {
		return fmt.Errorf("a canary model without a scenario")
	}
	if err := checkCurve("canary "+m.Scenario+": ", "c", "d", m.C, m.D, m.ResidualSD, m.UnthrottledRowsPerSec); err != nil {
		return err
	}
	if !finiteNumber(m.GoalX) || m.GoalX < 0 || !finiteNumber(m.AtGoal) || m.AtGoal < 0 {
		return fmt.Errorf("canary %s: p99_goal_x = %v, canary_at_p99_goal = %v; want numbers >= 0", m.Scenario, m.GoalX, m.AtGoal)
	}
	return nil
}

// CanaryModel returns the canary model fitted to the probe scenario
// called name.
func (f LatencyFit) CanaryModel(name string) (CanaryModel, bool) {
	i := slices.IndexFunc(f.Canary, func(m CanaryModel) bool { return m.Scenario == name })
	if i < 0 {
		return CanaryModel{}, false
	}
	return f.Canary[i], true
}

// CanaryModel is the canary model sc uses: its counterpart's where the
// replay probed it (surge, cpu-hog, write-heavy, quiet), surge's
// otherwise.
func (sc Scenario) CanaryModel() CanaryModel {
	if m, ok := fitted.CanaryModel(sc.Counterpart); ok {
		return m
	}
	m, _ := fitted.CanaryModel(defaultCounterpart)
	return m
}

// canary draws the canary's raw ratio of one tick.
type canary struct {
	m   CanaryModel
	rng interface{ NormFloat64() float64 }
}

// ratio is the tick's raw canary ratio with the jobs cleaning rows per
// second: the model's median times the fitted noise, or 1 with no rows
// (no job at work: the span's probes are all job-free). One draw a tick
// either way, so the stream does not depend on the rows.
func (c canary) ratio(rows float64) float64 {
	n := c.rng.NormFloat64()
	if rows <= 0 {
		return 1
	}
	return c.m.Ratio(rows/jobCeilingRows) * math.Exp(c.m.ResidualSD*n)
}
