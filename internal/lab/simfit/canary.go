package simfit

import (
	"math"
	"slices"

	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/lab/sim"
)

// canary.go: the canary's model. The product's foreground_latency signal
// times a one-row commit every 50 ms and reads the mean latency of the
// last two seconds of them over a job-free baseline. The replay's probe
// blocks (docs/replay/probe) run the same statement as an instrument
// under every window alike (Second.Probe), so each pair of a block gives
// the canary's stretch beside the foreground's p99 ratio at the same rows:
//
//	canary(x) = 1 + c·x^d,   c >= 0, d > 0,
//
// the mean probe latency of the policy window over that of its alone
// neighbours, fitted exactly as the p99 ratio is (least absolute
// deviations of ln ratio, x over the block's own unthrottled rows/s).
// The windows are two seconds, the product's span, so the spread of a
// pair around the curve is a tick's spread of the canary's raw reading.

// CanaryPoint is one pair of a probe block: a policy window against its
// alone neighbours, read from the instrument's canary.
type CanaryPoint struct {
	Policy string
	// RowsPerSec and X are the pair's, as Point's.
	RowsPerSec, X float64
	// P99Ratio is the pair's foreground p99 ratio (replay.Pair.Ratio).
	P99Ratio float64
	// Mean is the probes' mean latency in the window over the mean in
	// its neighbours' kept seconds; P90 the same of their p90s.
	Mean, P90 float64
	// Probes and AloneProbes are the probes each side read.
	Probes, AloneProbes uint64
}

// CanaryScenario is one probe block's canary fit.
type CanaryScenario struct {
	Name   string
	Fitted bool
	Reason string
	Model  sim.CanaryModel
	Points []CanaryPoint
	// P99 is the foreground's p99 ratio fitted to the same pairs, the
	// curve whose 1.10 crossing Model.GoalX is.
	P99 sim.LatencyModel
	// Checks are each policy's medians: rows/s, p99 ratio, the canary's
	// mean and p90 ratios, and the fit's canary at its median rows; for
	// adaptive, OwnRaw is the median of what its own controller read
	// (Second.CanaryRaw, the highest of each second) in its windows.
	Checks []CanaryCheck
}

// CanaryCheck is one policy's medians over its pairs of a probe block.
type CanaryCheck struct {
	Policy                             string
	Pairs                              int
	RowsPerSec, P99, Mean, P90, Fitted float64
	// OwnRaw is adaptive's own canary reading; NaN for other policies.
	OwnRaw float64
}

// probeSide is the instrument's canary probes over some seconds: counts
// by replay.Histogram bucket.
type probeSide struct {
	counts map[int]uint64
	n      uint64
	maxUs  int64
}

func (p *probeSide) add(s replay.Second) {
	if s.Probe == nil {
		return
	}
	if p.counts == nil {
		p.counts = map[int]uint64{}
	}
	for _, b := range s.Probe.Buckets {
		p.counts[int(b[0])] += b[1]
		p.n += b[1]
	}
	p.maxUs = max(p.maxUs, s.Probe.MaxUs)
}

// histGrowth is replay.Histogram's bucket growth: bucket i holds
// [g^i, g^(i+1)) microseconds.
var histGrowth = 1 + 2*replay.RelativeError

// mean is the probes' mean latency in microseconds, each read at its
// bucket's geometric middle (within 1 %); NaN with none.
func (p probeSide) mean() float64 {
	if p.n == 0 {
		return math.NaN()
	}
	var sum float64
	for i, c := range p.counts {
		sum += float64(c) * math.Pow(histGrowth, float64(i)+0.5)
	}
	return sum / float64(p.n)
}

// quantile is the probes' q-quantile in microseconds, read log-linearly
// inside its bucket by rank, as the replay reads a p99; NaN with none.
func (p probeSide) quantile(q float64) float64 {
	if p.n == 0 {
		return math.NaN()
	}
	idx := make([]int, 0, len(p.counts))
	for i := range p.counts {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	r := q * float64(p.n)
	var seen float64
	for _, i := range idx {
		c := float64(p.counts[i])
		if seen+c >= r {
			v := math.Pow(histGrowth, float64(i)+(r-seen)/c)
			if p.maxUs > 0 {
				v = min(v, float64(p.maxUs))
			}
			return v
		}
		seen += c
	}
	return float64(p.maxUs)
}

// kept reads window w's seconds past Dropped into p, but those the
// replay's goals leave out for steal (over 10 %; an unknown steal is
// kept), as replay.Pairs keeps them.
func (p *probeSide) kept(b *replay.Block, w replay.Window) {
	for t := max(w.Start+w.Dropped, 0); t < min(w.End, len(b.Seconds)); t++ {
		s := b.Seconds[t]
		if s.Steal >= 0 && s.Steal > 0.10 {
			continue
		}
		p.add(s)
	}
}

// CanaryPoints reads every policy pair of a probe block (replay.Pairs,
// the replay's default goals) whose both sides hold probes: the canary's
// mean and p90 ratios beside the pair's p99 ratio, x over the median of
// the unthrottled pairs' rows/s, x0.
func CanaryPoints(b *replay.Block) (pts []CanaryPoint, x0 float64) {
	var g replay.Goals
	var unthrottled []float64
	for _, label := range b.Policies() {
		pairs, _ := replay.Pairs(b, label, g)
		for _, pr := range pairs {
			if !finite(pr.RowsPerSec) || pr.RowsPerSec < 0 {
				continue
			}
			var pol, alone probeSide
			pol.kept(b, b.Windows[pr.Window])
			// The alone neighbours Pairs read: the windows either side.
			for _, j := range replay.AloneNeighbours(b, pr.Window) {
				alone.kept(b, b.Windows[j])
			}
			mean := pol.mean() / alone.mean()
			if pol.n == 0 || alone.n == 0 || !finite(mean) || mean <= 0 {
				continue
			}
			pts = append(pts, CanaryPoint{Policy: label, RowsPerSec: pr.RowsPerSec, P99Ratio: pr.Ratio, Mean: mean,
				P90: pol.quantile(0.90) / alone.quantile(0.90), Probes: pol.n, AloneProbes: alone.n})
			if label == replay.PolicyUnthrottled {
				unthrottled = append(unthrottled, pr.RowsPerSec)
			}
		}
	}
	x0 = unthrottledRowsPerSec(unthrottled)
	for i := range pts {
		pts[i].X = relativeX(pts[i].RowsPerSec, x0)
	}
	return pts, x0
}

// FitCanaryBlock fits a probe block's canary model, and the foreground's
// p99 ratio to the same pairs for the canary's reading at its goal.
func FitCanaryBlock(b *replay.Block) CanaryScenario {
	s := CanaryScenario{Name: b.Scenario}
	pts, x0 := CanaryPoints(b)
	s.Points = pts
	s.Model = sim.CanaryModel{Scenario: b.Scenario, Points: len(pts), UnthrottledRowsPerSec: x0}
	switch {
	case len(pts) == 0:
		s.Reason = "no pair with the instrument's canary on both sides (a block run without --probe)"
		return s
	case x0 <= 0:
		s.Reason = "no unthrottled window cleaned a row"
		return s
	}
	var xs, ys, px, py []float64
	for _, p := range pts {
		xs, ys = append(xs, p.X), append(ys, p.Mean)
		if finite(p.P99Ratio) && p.P99Ratio > 0 {
			px, py = append(px, p.X), append(py, p.P99Ratio)
		}
	}
	c, d := Fit(xs, ys)
	s.Model.C, s.Model.D = round4(c), round4(d)
	sd, outliers := residuals(s.Model.Ratio, xs, ys)
	s.Model.ResidualSD, s.Model.Outliers = round4(sd), outliers
	s.P99 = sim.LatencyModel{Scenario: b.Scenario, Points: len(px), UnthrottledRowsPerSec: x0}
	if len(px) > 0 {
		a, bb := Fit(px, py)
		s.P99.A, s.P99.B = round4(a), round4(bb)
		psd, pout := residuals(s.P99.Ratio, px, py)
		s.P99.ResidualSD, s.P99.Outliers = round4(psd), pout
		s.Model.P99A, s.Model.P99B = s.P99.A, s.P99.B
		if x, ok := GoalCrossing(s.P99, sim.P99Goal); ok {
			s.Model.GoalX = round4(x)
			s.Model.AtGoal = round4(s.Model.Ratio(x))
		}
	}
	s.Fitted = true
	for _, label := range b.Policies() {
		var rows, p99s, means, p90s []float64
		for _, p := range pts {
			if p.Policy == label {
				rows, means = append(rows, p.RowsPerSec), append(means, p.Mean)
				if finite(p.P99Ratio) {
					p99s = append(p99s, p.P99Ratio)
				}
				if finite(p.P90) {
					p90s = append(p90s, p.P90)
				}
			}
		}
		if len(rows) == 0 {
			continue
		}
		ck := CanaryCheck{Policy: label, Pairs: len(rows), RowsPerSec: median(rows), Mean: median(means),
			P99: medianOrNaN(p99s), P90: medianOrNaN(p90s), OwnRaw: math.NaN()}
		ck.Fitted = s.Model.Ratio(ck.RowsPerSec / x0)
		if label == replay.PolicyAdaptive {
			ck.OwnRaw = ownCanary(b, label)
		}
		s.Checks = append(s.Checks, ck)
	}
	return s
}

// ownCanary is the median over label's windows' seconds past Dropped of
// what its own controller's canary read raw (Second.CanaryRaw); NaN where
// none read.
func ownCanary(b *replay.Block, label string) float64 {
	var xs []float64
	for _, w := range b.Windows {
		if w.Label() != label {
			continue
		}
		for t := w.Start + w.Dropped; t < w.End; t++ {
			if r := b.Seconds[t].CanaryRaw; r > 0 {
				xs = append(xs, r)
			}
		}
	}
	return medianOrNaN(xs)
}

// GoalCrossing is the x at which m's median p99 ratio reaches goal: where
// 1 + a·x^b = goal. ok is false for a flat curve (never there).
func GoalCrossing(m sim.LatencyModel, goal float64) (x float64, ok bool) {
	if m.A <= 0 || m.B <= 0 || goal <= 1 {
		return 0, false
	}
	return math.Pow((goal-1)/m.A, 1/m.B), true
}

// FitCanaryBlocks fits every probe block, in the blocks' order: the
// fitted models for plantfit.json and every block's fit.
func FitCanaryBlocks(blocks []*replay.Block) ([]sim.CanaryModel, []CanaryScenario) {
	var models []sim.CanaryModel
	var all []CanaryScenario
	for _, b := range blocks {
		s := FitCanaryBlock(b)
		all = append(all, s)
		if s.Fitted {
			models = append(models, s.Model)
		}
	}
	return models, all
}

func medianOrNaN(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return median(xs)
}
