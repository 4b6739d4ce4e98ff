// Package simfit fits the simulator's foreground-latency model to the
// replay's real measurements: per replay scenario, the foreground's p99
// ratio against the job's rows per second, from every pair of a block
// (replay.Pairs), written to internal/lab/sim/plantfit.json by `throttled sim
// fit` (make sim-fit); and, in canary.go, the foreground_latency
// canary's ratio the same way, from the replay's probe blocks
// (docs/replay/probe).
//
// The model is ratio(x) = 1 + a·x^b with a >= 0 and b > 0: 1 with no
// job, non-decreasing in x. x is the window's rows per second over the
// median of the scenario's unthrottled windows', not absolute rows per
// second: the replay's machine (2 cores) and the simulator's primary (8)
// differ, and what transfers between them is how much of the job's
// ceiling a policy uses (the simulator's ceiling is its jobs' unpaced
// rate). The measurements then span x from 0 to about 1, where the
// simulator's policies run, so nothing is read off past the data; in
// absolute rows the simulator's unpaced jobs (400,000 rows/s) would be
// twice past the fastest window ever measured.
//
// The fit is least absolute deviations on ln ratio: the curve is the
// ratio's conditional median, as the replay's verdicts judge a policy by
// its pairs' median, and a window struck by a stall moves it no more
// than any other point that falls on the same side.
package simfit

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/lab/sim"
)

// Command is the command that writes plantfit.json, as the file names it.
const Command = "make sim-fit (throttled sim fit --results docs/replay --out internal/lab/sim/plantfit.json)"

// Point is one pair of a block: a policy window against the foreground
// alone next to it.
type Point struct {
	// Policy is the window's label (a/a, unthrottled, fixed-2.6, ...).
	Policy string
	// RowsPerSec is what the job cleaned per second of the window; X
	// that over the scenario's unthrottled rows per second.
	RowsPerSec, X float64
	// Ratio is the window's p99 over the alone windows'.
	Ratio float64
}

// Check is one policy's measured median ratio beside the fit's, at its
// median rows per second: what a person reads to judge the fit.
type Check struct {
	Policy     string
	Pairs      int
	RowsPerSec float64
	Measured   float64
	Fitted     float64
}

// Scenario is one block's fit.
type Scenario struct {
	Name string
	// Fitted is false where the block gives no model (Reason says why):
	// no pair with a ratio (no foreground), or no unthrottled window
	// that cleaned a row.
	Fitted bool
	Reason string
	Model  sim.LatencyModel
	Points []Point
	// Checks are the fixed rates' and unthrottled's, in the block's
	// order.
	Checks []Check
}

// Points reads every policy pair of b that has a p99 ratio (the
// replay's default goals: seconds with steal over 10 % are left out),
// with x over the median of the unthrottled windows' rows per second,
// x0 (0 where none cleaned a row).
func Points(b *replay.Block) (pts []Point, x0 float64) {
	var g replay.Goals
	var unthrottled []float64
	for _, label := range b.Policies() {
		pairs, _ := replay.Pairs(b, label, g)
		for _, p := range pairs {
			if !finite(p.Ratio) || p.Ratio <= 0 || !finite(p.RowsPerSec) || p.RowsPerSec < 0 {
				continue
			}
			pts = append(pts, Point{Policy: label, RowsPerSec: p.RowsPerSec, Ratio: p.Ratio})
			if label == replay.PolicyUnthrottled {
				unthrottled = append(unthrottled, p.RowsPerSec)
			}
		}
	}
	x0 = unthrottledRowsPerSec(unthrottled)
	for i := range pts {
		pts[i].X = relativeX(pts[i].RowsPerSec, x0)
	}
	return pts, x0
}

// FitBlock fits b's model.
func FitBlock(b *replay.Block) Scenario {
	s := Scenario{Name: b.Scenario}
	pts, x0 := Points(b)
	s.Points = pts
	s.Model = sim.LatencyModel{Scenario: b.Scenario, Points: len(pts), UnthrottledRowsPerSec: x0, Steal: Steal(b), AloneLogSD: round4(AloneLogSD(b))}
	switch {
	case len(pts) == 0:
		s.Reason = "no pair with a p99 ratio (no foreground)"
		return s
	case x0 <= 0:
		s.Reason = "no unthrottled window cleaned a row"
		return s
	}
	xs, ys := make([]float64, len(pts)), make([]float64, len(pts))
	for i, p := range pts {
		xs[i], ys[i] = p.X, p.Ratio
	}
	// Stored to four decimals, so a refit on another machine writes the
	// same file; the residuals are those of the constants stored.
	a, bb := Fit(xs, ys)
	s.Model.A, s.Model.B = round4(a), round4(bb)
	sd, outliers := Residuals(s.Model, xs, ys)
	s.Model.ResidualSD, s.Model.Outliers = round4(sd), outliers
	s.Fitted = true
	for _, label := range b.Policies() {
		if label != replay.PolicyUnthrottled && !strings.HasPrefix(label, replay.PolicyFixed+"-") {
			continue
		}
		var rows, ratios []float64
		for _, p := range pts {
			if p.Policy == label {
				rows, ratios = append(rows, p.RowsPerSec), append(ratios, p.Ratio)
			}
		}
		if len(rows) == 0 {
			continue
		}
		r := median(rows)
		s.Checks = append(s.Checks, Check{Policy: label, Pairs: len(rows), RowsPerSec: r, Measured: median(ratios), Fitted: s.Model.Ratio(r / x0)})
	}
	return s
}

// FitBlocks fits every block and returns plantfit.json's content (the
// fitted models, in the blocks' order) and every block's fit, those
// without a model included.
func FitBlocks(blocks []*replay.Block) (sim.LatencyFit, []Scenario) {
	f := sim.LatencyFit{Form: sim.LatencyForm, Command: Command}
	var all []Scenario
	for _, b := range blocks {
		s := FitBlock(b)
		all = append(all, s)
		if s.Fitted {
			f.Models = append(f.Models, s.Model)
		}
	}
	return f, all
}

// FitAll fits the p99 models to blocks and the canary models to probes
// (the probe blocks, docs/replay/probe): plantfit.json's whole content,
// and every block's fit of each.
func FitAll(blocks, probes []*replay.Block) (sim.LatencyFit, []Scenario, []CanaryScenario) {
	f, all := FitBlocks(blocks)
	f.CanaryForm = sim.CanaryForm
	var canaries []CanaryScenario
	f.Canary, canaries = FitCanaryBlocks(probes)
	return f, all, canaries
}

// The search's bounds. b under 0.1 is a step at x = 0 (any job, however
// slow, costs all of it), over 5 no cost until the job is almost
// unthrottled: neither is a curve the data could tell from its
// neighbours. a is the excess at x = 1, so 1000 is far past any ratio
// measured.
const (
	minB, maxB = 0.1, 5.0
	minA, maxA = 1e-4, 1e3
)

// Fit returns the a >= 0 and b in [0.1, 5] of ratio(x) = 1 + a·x^b that
// minimise the sum of |ln ratio_i − ln ratio(x_i)| over the points with
// x > 0 (those at x = 0 the curve meets at 1 whatever a and b are, so
// they bear on the residuals only). A grid over ln a and ln b (a = 0,
// the flat curve, among the candidates) finds the basin; a pattern
// search refines it. Where the flat curve fits best, b is 1: with a = 0
// it means nothing. Deterministic: the same points give the same
// constants.
func Fit(xs, ratios []float64) (a, b float64) {
	type pt struct{ x, y float64 }
	var ps []pt
	for i := range min(len(xs), len(ratios)) {
		if xs[i] > 0 && finite(xs[i]) && ratios[i] > 0 && finite(ratios[i]) {
			ps = append(ps, pt{xs[i], math.Log(ratios[i])})
		}
	}
	if len(ps) == 0 {
		return 0, 1
	}
	loss := func(a, b float64) float64 {
		var s float64
		for _, p := range ps {
			s += math.Abs(p.y - math.Log1p(a*math.Pow(p.x, b)))
		}
		return s
	}
	flat := loss(0, 1)
	// The grid, in ln a and ln b.
	const na, nb = 141, 81
	la0, la1 := math.Log(minA), math.Log(maxA)
	lb0, lb1 := math.Log(minB), math.Log(maxB)
	bestLA, bestLB, best := 0.0, 0.0, math.Inf(1)
	for i := range na {
		la := la0 + (la1-la0)*float64(i)/(na-1)
		for j := range nb {
			lb := lb0 + (lb1-lb0)*float64(j)/(nb-1)
			if l := loss(math.Exp(la), math.Exp(lb)); l < best {
				bestLA, bestLB, best = la, lb, l
			}
		}
	}
	// Pattern search from the grid's best, within the bounds.
	stepA, stepB := (la1-la0)/(na-1), (lb1-lb0)/(nb-1)
	for stepA > 1e-9 || stepB > 1e-9 {
		moved := false
		for _, d := range [][2]float64{{1, 0}, {-1, 0}, {0, 1}, {0, -1}, {1, 1}, {-1, -1}, {1, -1}, {-1, 1}} {
			la := min(max(bestLA+d[0]*stepA, la0), la1)
			lb := min(max(bestLB+d[1]*stepB, lb0), lb1)
			if l := loss(math.Exp(la), math.Exp(lb)); l < best {
				bestLA, bestLB, best, moved = la, lb, l, true
			}
		}
		if !moved {
			stepA, stepB = stepA/2, stepB/2
		}
	}
	if flat <= best {
		return 0, 1
	}
	return math.Exp(bestLA), math.Exp(bestLB)
}

// Residuals is the spread of ln ratio around m's curve over every point,
// those at x = 0 included: 1.4826 times the median absolute residual (a
// normal's standard deviation, read so that a few stalls do not widen
// it), and how many points lie more than three of it away.
func Residuals(m sim.LatencyModel, xs, ratios []float64) (sd float64, outliers int) {
	return residuals(m.Ratio, xs, ratios)
}

// residuals is Residuals around any curve.
func residuals(curve func(float64) float64, xs, ratios []float64) (sd float64, outliers int) {
	var abs []float64
	for i := range min(len(xs), len(ratios)) {
		if ratios[i] > 0 && finite(ratios[i]) && finite(xs[i]) {
			abs = append(abs, math.Abs(math.Log(ratios[i])-math.Log(curve(xs[i]))))
		}
	}
	if len(abs) == 0 {
		return 0, 0
	}
	sd = 1.4826 * median(abs)
	for _, r := range abs {
		if r > 3*sd {
			outliers++
		}
	}
	return sd, outliers
}

// AloneLogSD is the spread of ln latency of the foreground alone's
// transactions in b, read off their quantiles: (ln p99 - ln p50) /
// 2.3263, over the server part (the whole latency in blocks recorded
// before the split) of every alone window's seconds, leaving out each
// window's dropped seconds and seconds with steal over 10 %, as the
// verdicts do. 0 where b has no such transaction.
func AloneLogSD(b *replay.Block) float64 {
	h := replay.NewHistogram()
	for _, w := range b.Windows {
		if w.Policy != replay.PolicyAlone {
			continue
		}
		for _, s := range b.Seconds {
			if s.T < w.Start+w.Dropped || s.T >= w.End || s.Steal > 0.10 {
				continue
			}
			if s.Server.Count() > 0 {
				s.Server.AddTo(h)
			} else {
				s.Lat.AddTo(h)
			}
		}
	}
	if h.Count() == 0 {
		return 0
	}
	p50, p99 := h.Quantile(0.50).Seconds(), h.Quantile(0.99).Seconds()
	if !(p50 > 0) || !(p99 > p50) {
		return 0
	}
	return math.Log(p99/p50) / 2.3263478740408408
}

// Steal is the distribution of the hypervisor's steal share over b's
// seconds where it could be read.
func Steal(b *replay.Block) sim.StealStats {
	var xs []float64
	for _, s := range b.Seconds {
		if s.Steal >= 0 && finite(s.Steal) {
			xs = append(xs, s.Steal)
		}
	}
	st := sim.StealStats{Seconds: len(xs)}
	if len(xs) == 0 {
		return st
	}
	slices.Sort(xs)
	over := 0
	for _, x := range xs {
		if x > 0.10 {
			over++
		}
	}
	st.OverShare = round4(float64(over) / float64(len(xs)))
	st.P50, st.P90, st.P99 = round4(quantile(xs, 0.50)), round4(quantile(xs, 0.90)), round4(quantile(xs, 0.99))
	st.Max = round4(xs[len(xs)-1])
	return st
}

// quantile is sorted xs's q-quantile by nearest rank.
func quantile(xs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// unthrottledRowsPerSec is x = 1: the median of unthrottled's windows'
// rows per second, 0 without any.
func unthrottledRowsPerSec(unthrottled []float64) float64 {
	if len(unthrottled) == 0 {
		return 0
	}
	return median(unthrottled)
}

// relativeX is rowsPerSec over x0, unthrottled's; 0 where x0 is unknown.
func relativeX(rowsPerSec, x0 float64) float64 {
	if x0 <= 0 {
		return 0
	}
	return rowsPerSec / x0
}

// median is the middle of xs, or the mean of the middle two; xs is left
// as it was.
func median(xs []float64) float64 {
	s := slices.SortedFunc(slices.Values(xs), cmp.Compare[float64])
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
