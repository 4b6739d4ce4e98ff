package sim

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// latency.go: the foreground's p99 in the plant. The plant's load says
// how busy the primary is; what the users feel is their p99, and that is
// fitted to the replay's real measurements (docs/replay, by `throttled
// sim fit`, into plantfit.json): per replay scenario, the p99 ratio of a
// window where the job cleaned x of its unthrottled rows per second over
// the foreground alone's next to it,
//
//	ratio(x) = 1 + a·x^b,   a >= 0, b > 0,
//
// a fitted median (least absolute deviations of ln ratio), with the
// spread of ln ratio around it. The simulator reads it as an output
// only: no policy sees it.

// LatencyForm is the fitted model's form, as plantfit.json names it.
const LatencyForm = "ratio(x) = 1 + a*x^b; x = the job's rows/s over its unthrottled rows/s in the scenario; ln ratio ~ ln ratio(x) + N(0, residual_sd)"

// P99Goal is the p99 ratio the replay judges a policy by: 1.10.
const P99Goal = 1.10

// LatencyFit is plantfit.json: one latency model per replay scenario
// that has a foreground.
type LatencyFit struct {
	Form string `json:"form"`
	// Command is the command that fitted it.
	Command string         `json:"command"`
	Models  []LatencyModel `json:"models"`
	// CanaryForm is the canary models' form; Canary one canary model per
	// probe scenario (docs/replay/probe).
	CanaryForm string        `json:"canary_form"`
	Canary     []CanaryModel `json:"canary"`
}

// LatencyModel is one replay scenario's fitted foreground p99 ratio
// against the job's rows per second.
type LatencyModel struct {
	// Scenario is the replay scenario (docs/replay/<scenario>.json).
	Scenario string `json:"scenario"`
	// Points is the pairs fitted: every policy window with a p99 ratio,
	// the a/a ones (no job) at x = 0.
	Points int `json:"points"`
	// UnthrottledRowsPerSec is the median rows/s of the scenario's
	// unthrottled windows: x = 1.
	UnthrottledRowsPerSec float64 `json:"unthrottled_rows_per_s"`
	// A and B are the curve's constants.
	A float64 `json:"a"`
	B float64 `json:"b"`
	// ResidualSD is the spread of ln ratio around the curve, read
	// robustly (1.4826 times the median absolute residual), so the few
	// windows a stall struck do not widen it; Outliers counts the points
	// more than three of it away.
	ResidualSD float64 `json:"residual_sd"`
	Outliers   int     `json:"outliers"`
	// AloneLogSD is the spread of ln latency of the foreground alone's
	// transactions (the server part, pooled over the block's alone
	// windows), read off their quantiles: (ln p99 - ln p50) / 2.3263. It
	// is how [WindowRatio] pools a window's seconds.
	AloneLogSD float64 `json:"alone_log_sd"`
	// Steal is the hypervisor's steal over the scenario's seconds.
	Steal StealStats `json:"steal"`
}

// StealStats is the distribution of the hypervisor's steal share over a
// block's seconds (those where it could be read).
type StealStats struct {
	Seconds int `json:"seconds"`
	// OverShare is the share of seconds with steal over 10 %, the
	// replay's cut-off for a second's latency.
	OverShare float64 `json:"share_over_0_10"`
	P50       float64 `json:"p50"`
	P90       float64 `json:"p90"`
	P99       float64 `json:"p99"`
	Max       float64 `json:"max"`
}

// Ratio is the model's median p99 ratio at x, the job's rows/s over its
// unthrottled rows/s: 1 at x <= 0, non-decreasing.
func (m LatencyModel) Ratio(x float64) float64 { return powerCurve(m.A, m.B, x) }

// powerCurve is 1 + a·x^b: 1 at x <= 0 or a <= 0, the form of the
// latency and canary models.
func powerCurve(a, b, x float64) float64 {
	if x <= 0 || a <= 0 {
		return 1
	}
	return 1 + a*math.Pow(x, b)
}

// finiteNumber reports whether v is neither NaN nor infinite.
func finiteNumber(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// checkCurve reports the first constant of a 1 + a·x^b model that would
// make it something other than a non-decreasing curve from 1: prefix
// names the model in the error, aName and bName its constants.
func checkCurve(prefix, aName, bName string, a, b, residualSD, unthrottled float64) error {
	switch {
	case !finiteNumber(a) || a < 0:
		return fmt.Errorf("%s%s = %v; want a number >= 0", prefix, aName, a)
	case !finiteNumber(b) || b <= 0:
		return fmt.Errorf("%s%s = %v; want a number > 0", prefix, bName, b)
	case !finiteNumber(residualSD) || residualSD < 0:
		return fmt.Errorf("%sresidual_sd = %v; want a number >= 0", prefix, residualSD)
	case !finiteNumber(unthrottled) || unthrottled <= 0:
		return fmt.Errorf("%sunthrottled_rows_per_s = %v; want a number > 0", prefix, unthrottled)
	}
	return nil
}

// check reports the first constant that would make the model something
// other than a non-decreasing curve from 1.
func (m LatencyModel) check() error {
	if m.Scenario == "" {
		return fmt.Errorf("a model without a scenario")
	}
	if !finiteNumber(m.AloneLogSD) || m.AloneLogSD < 0 {
		return fmt.Errorf("%s: alone_log_sd = %v; want a number >= 0", m.Scenario, m.AloneLogSD)
	}
	return checkCurve(m.Scenario+": ", "a", "b", m.A, m.B, m.ResidualSD, m.UnthrottledRowsPerSec)
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// WindowRatio is the p99 of a window's transactions pooled, over the
// foreground alone's, where its seconds had the p99 ratios rs: each
// second's latencies are the alone ones scaled by its ratio, and the
// alone ones are log-normal with spread sd in ln (LatencyModel's
// AloneLogSD). This is how the replay judges a window: one second at a
// high ratio lifts the pooled p99 of twenty by more than the seconds'
// median says, so a policy that swings around a rate reads worse than
// a fixed rate at its mean. With sd <= 0 it is the largest ratio; 1 for
// no seconds.
func WindowRatio(rs []float64, sd float64) float64 {
	if len(rs) == 0 {
		return 1
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		l := math.Log(max(r, 1e-9))
		lo, hi = min(lo, l), max(hi, l)
	}
	if !(sd > 0) {
		return slices.Max(rs)
	}
	// The share of the window's transactions over exp(q), in ln units
	// of the alone p99: decreasing in q.
	over := func(q float64) float64 {
		sum := 0.0
		for _, r := range rs {
			sum += 0.5 * math.Erfc((q+z99*sd-math.Log(max(r, 1e-9)))/(sd*math.Sqrt2))
		}
		return sum / float64(len(rs))
	}
	// The pooled p99 lies between the lowest and the highest second's.
	for range 60 {
		mid := (lo + hi) / 2
		if over(mid) > 0.01 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Exp((lo + hi) / 2)
}

// ParseLatencyFit reads plantfit.json and checks every model.
func ParseLatencyFit(raw []byte) (LatencyFit, error) {
	var f LatencyFit
	if err := json.Unmarshal(raw, &f); err != nil {
		return LatencyFit{}, fmt.Errorf("sim: plantfit.json: %w", err)
	}
	seen := map[string]bool{}
	for _, m := range f.Models {
		if err := m.check(); err != nil {
			return LatencyFit{}, fmt.Errorf("sim: plantfit.json: %w", err)
		}
		if seen[m.Scenario] {
			return LatencyFit{}, fmt.Errorf("sim: plantfit.json: %s fitted twice", m.Scenario)
		}
		seen[m.Scenario] = true
	}
	if !seen[defaultCounterpart] {
		return LatencyFit{}, fmt.Errorf("sim: plantfit.json: no model for %s, the default counterpart", defaultCounterpart)
	}
	seen = map[string]bool{}
	for _, m := range f.Canary {
		if err := m.check(); err != nil {
			return LatencyFit{}, fmt.Errorf("sim: plantfit.json: %w", err)
		}
		if seen[m.Scenario] {
			return LatencyFit{}, fmt.Errorf("sim: plantfit.json: canary %s fitted twice", m.Scenario)
		}
		seen[m.Scenario] = true
	}
	if !seen[defaultCounterpart] {
		return LatencyFit{}, fmt.Errorf("sim: plantfit.json: no canary model for %s, the default counterpart", defaultCounterpart)
	}
	return f, nil
}

// Model returns the model fitted to the replay scenario called name.
func (f LatencyFit) Model(name string) (LatencyModel, bool) {
	i := slices.IndexFunc(f.Models, func(m LatencyModel) bool { return m.Scenario == name })
	if i < 0 {
		return LatencyModel{}, false
	}
	return f.Models[i], true
}

// MarshalIndent is the file's stored form: indented, one trailing
// newline, so a refit's diff shows the constants that moved.
func (f LatencyFit) MarshalIndent() ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

//go:embed plantfit.json
var plantFitJSON []byte

// fitted is plantfit.json, read once.
var fitted = func() LatencyFit {
	f, err := ParseLatencyFit(plantFitJSON)
	if err != nil {
		panic(err) // TestPlantFit says why; sim fit checks what it writes
	}
	return f
}()

// defaultCounterpart is the replay scenario whose model a simulated one
// without a nearer counterpart uses.
const defaultCounterpart = "surge"

// LatencyModel is the fitted model sc uses: its counterpart's, or
// surge's.
func (sc Scenario) LatencyModel() LatencyModel {
	if m, ok := fitted.Model(sc.Counterpart); ok {
		return m
	}
	m, _ := fitted.Model(defaultCounterpart)
	return m
}

// jobCeilingRows is the simulated jobs' rows per second unpaced: x = 1,
// as a replay scenario's unthrottled rows/s is.
const jobCeilingRows = maxBudget * rowsPerBatch

// latency draws the foreground's p99 ratio of one tick.
type latency struct {
	m   LatencyModel
	rng interface{ NormFloat64() float64 }
}

// ratio is the tick's p99 ratio with the jobs cleaning rows per second:
// the model's median times the fitted noise.
func (l latency) ratio(rows float64) float64 {
	return l.m.Ratio(rows/jobCeilingRows) * math.Exp(l.m.ResidualSD*l.rng.NormFloat64())
}
