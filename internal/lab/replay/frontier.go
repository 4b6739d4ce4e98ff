package replay

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// frontier.go: the open-loop policies as a curve of p99 ratio against
// rows per second, with intervals: the fixed rates, and unthrottled at
// its top (the open-loop policy at the most rows a job can clean). An
// open-loop policy knows nothing of the load; a controller that reads it
// should clean at least as many rows for the same harm. Each point is its
// policy's pairs pooled (DecidePooled); the curve is their isotonic fit;
// the oracle is the rows at the goal's ratio on it; and a policy is on or
// beyond the frontier where its pooled ratio, at its own rows per second,
// is not above the curve's there. Every figure carries a bootstrap
// interval that resamples each policy's pairs and each open-loop policy's
// at once, so the curve's own noise is in it.
//
// Why unthrottled is on the curve: without it the curve ran flat past the
// fastest fixed rate, so a controller cleaning more rows than any fixed
// rate was held to that rate's harm. In lock-contention the fixed rates'
// batches wait out the lock, shrink, and clean at most 606 rows/s at a
// ratio of 1.04, while unthrottled cleans 45,624 at 2.15: adaptive, at
// 8,665 rows/s, was judged against 1.04, a point no open-loop policy had
// measured.

// Frontier is the open-loop policies' curve in one block, and where a
// policy stands against it.
type Frontier struct {
	// Points are the fixed rates, slowest first, then unthrottled: their
	// pooled ratio and their rows per second (the mean over their pairs),
	// with the pairs' number.
	Points []FrontierPoint
	// Oracle is the rows per second at the goal's ratio on the curve,
	// with its interval; OK false where there is no fixed rate.
	Oracle, OracleLow, OracleHigh float64
	OK                            bool
}

// FrontierPoint is one open-loop policy on the curve (Rate is +Inf for
// unthrottled).
type FrontierPoint struct {
	Label      string
	Rate       float64
	Ratio      float64
	Low, High  float64
	RowsPerSec float64
	Pairs      int
}

// Standing is a policy against the frontier: its pooled ratio over the
// curve's at its own rows per second (at most 1: on or beyond the
// frontier), and its rows over the oracle's, each with its interval.
type Standing struct {
	Verdict
	// OfOracle is the policy's rows per second over the oracle's, with
	// its interval.
	OfOracle, OfOracleLow, OfOracleHigh float64
}

// curveAt is the fitted ratio at rows w on the curve through pts
// (isotonic in rows, from 0 rows at ratio 1), flat past the last point
// (unthrottled's, where the block ran it).
func curveAt(pts []RatePoint, w float64) float64 {
	kx, kr := curveKnots(pts)
	if len(kx) == 1 {
		return math.NaN()
	}
	for i := 1; i < len(kx); i++ {
		if w <= kx[i] {
			t := (w - kx[i-1]) / (kx[i] - kx[i-1])
			return kr[i-1] + t*(kr[i]-kr[i-1])
		}
	}
	return kr[len(kr)-1]
}

// curveKnots is the curve through pts as knots of rows and fitted ratio,
// from (0, 1).
func curveKnots(pts []RatePoint) (kx, kr []float64) {
	var x, y []float64
	for _, p := range pts {
		if verdictFinite(p.Ratio) && verdictFinite(p.RowsPerSec) && p.RowsPerSec > 0 {
			x, y = append(x, p.RowsPerSec), append(y, p.Ratio)
		}
	}
	fit := FitIsotonic(x, y)
	order := make([]int, len(x))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(x[a], x[b]) })
	kx, kr = []float64{0}, []float64{1}
	for _, i := range order {
		if x[i] == kx[len(kx)-1] {
			continue
		}
		kx, kr = append(kx, x[i]), append(kr, max(1, fit[i]))
	}
	return kx, kr
}

// fixedSample is one open-loop policy's pairs, for resampling.
type fixedSample struct {
	label string
	rate  float64
	pairs []Pair
}

func meanRows(ps []Pair, idx []int) float64 {
	if len(idx) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, i := range idx {
		sum += ps[i].RowsPerSec
	}
	return sum / float64(len(idx))
}

func allIdx(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func resample(rng *rand.Rand, n int, idx []int) []int {
	idx = idx[:0]
	for range n {
		idx = append(idx, rng.IntN(n))
	}
	return idx
}

// fixedSamples gathers each open-loop policy's usable pairs in b: the
// fixed rates, slowest first, then unthrottled (rate +Inf). None where b
// ran no fixed rate: unthrottled alone is no curve.
func fixedSamples(b *Block, g Goals) []fixedSample {
	var out []fixedSample
	fixed := false
	for _, label := range b.Policies() {
		isFixed := strings.HasPrefix(label, PolicyFixed+"-")
		if !isFixed && label != PolicyUnthrottled {
			continue
		}
		pairs, _ := Pairs(b, label, g)
		pairs = usablePairs(pairs)
		if len(pairs) == 0 {
			continue
		}
		rate := math.Inf(1)
		if isFixed {
			fixed = true
			i := slices.IndexFunc(b.Windows, func(w Window) bool { return w.Label() == label })
			rate = b.Windows[i].Rate
		}
		out = append(out, fixedSample{label: label, rate: rate, pairs: pairs})
	}
	if !fixed {
		return nil
	}
	slices.SortFunc(out, func(a, b fixedSample) int { return cmp.Compare(a.rate, b.rate) })
	return out
}

func usablePairs(pairs []Pair) []Pair {
	return slices.DeleteFunc(slices.Clone(pairs), func(p Pair) bool {
		return p.lat == nil || p.aloneLat == nil || p.lat.Count() == 0 || p.aloneLat.Count() == 0
	})
}

// points is the curve's points from each open-loop policy's pairs idx[k] names
// (all where idx is nil).
func points(fs []fixedSample, idx [][]int) []RatePoint {
	pts := make([]RatePoint, len(fs))
	for k, f := range fs {
		ix := allIdx(len(f.pairs))
		if idx != nil {
			ix = idx[k]
		}
		pts[k] = RatePoint{Rate: f.rate, Ratio: pooledStat(f.pairs, ix, PooledP99Ratio), RowsPerSec: meanRows(f.pairs, ix)}
	}
	return pts
}

// oracleOn is the rows per second at ratio goal on the curve through pts
// (0 where even the slowest is over it; the fastest's where none is).
func oracleOn(pts []RatePoint, goal float64) float64 {
	kx, kr := curveKnots(pts)
	last := len(kx) - 1
	if kr[last] <= goal {
		return kx[last]
	}
	for i := last - 1; i >= 0; i-- {
		if kr[i] <= goal {
			t := (goal - kr[i]) / (kr[i+1] - kr[i])
			return kx[i] + t*(kx[i+1]-kx[i])
		}
	}
	return 0
}

// FrontierOf reads b's open-loop policies as a curve.
func FrontierOf(b *Block, g Goals) Frontier {
	g.fill()
	fs := fixedSamples(b, g)
	var f Frontier
	if len(fs) == 0 {
		return f
	}
	for _, s := range fs {
		pairs := s.pairs
		lo, hi := bootstrapPooled(pairs, PooledP99Ratio, g)
		f.Points = append(f.Points, FrontierPoint{Label: s.label, Rate: s.rate, Ratio: pooledStat(pairs, nil, PooledP99Ratio),
			Low: lo, High: hi, RowsPerSec: meanRows(pairs, allIdx(len(pairs))), Pairs: len(pairs)})
	}
	f.OK = true
	f.Oracle = oracleOn(points(fs, nil), g.P99Ratio)
	rng := rand.New(rand.NewPCG(g.Seed, 0xf207))
	vals := make([]float64, 0, g.Resamples)
	idx := make([][]int, len(fs))
	for range g.Resamples {
		for k := range fs {
			idx[k] = resample(rng, len(fs[k].pairs), idx[k])
		}
		vals = append(vals, oracleOn(points(fs, idx), g.P99Ratio))
	}
	f.OracleLow, f.OracleHigh = percentiles(vals, g.Confidence)
	return f
}

// StandingOf judges label's windows in b against the open-loop curve:
// met where the interval of its pooled ratio over the curve's ratio at its
// rows per second lies at or under 1 (on or beyond the frontier), not met
// where it lies over, else undecided. The resamples draw the policy's
// pairs and every open-loop policy's at once.
func StandingOf(b *Block, label string, g Goals) Standing {
	g.fill()
	s := Standing{Verdict: Verdict{Outcome: OutcomeUndecided, Median: math.NaN(), Low: math.NaN(), High: math.NaN(), Goal: 1},
		OfOracle: math.NaN(), OfOracleLow: math.NaN(), OfOracleHigh: math.NaN()}
	fs := fixedSamples(b, g)
	pairs, _ := Pairs(b, label, g)
	ps := usablePairs(pairs)
	s.Pairs = len(ps)
	if len(fs) == 0 || len(ps) == 0 {
		s.Reason = "no fixed rates or no pairs"
		return s
	}
	rel := func(pidx []int, fidx [][]int) (float64, float64) {
		pts := points(fs, fidx)
		w := meanRows(ps, pidx)
		r := pooledStat(ps, pidx, PooledP99Ratio) / curveAt(pts, w)
		o := oracleOn(pts, g.P99Ratio)
		of := math.NaN()
		if o > 0 {
			of = w / o
		}
		return r, of
	}
	s.Median, s.OfOracle = rel(allIdx(len(ps)), nil)
	rng := rand.New(rand.NewPCG(g.Seed, 0xf208))
	var rs, ofs []float64
	fidx := make([][]int, len(fs))
	var pidx []int
	for range g.Resamples {
		for k := range fs {
			fidx[k] = resample(rng, len(fs[k].pairs), fidx[k])
		}
		pidx = resample(rng, len(ps), pidx)
		r, of := rel(pidx, fidx)
		if verdictFinite(r) {
			rs = append(rs, r)
		}
		if verdictFinite(of) {
			ofs = append(ofs, of)
		}
	}
	s.Low, s.High = percentiles(rs, g.Confidence)
	s.OfOracleLow, s.OfOracleHigh = percentiles(ofs, g.Confidence)
	switch {
	case len(ps) < g.MinPairs:
		s.Reason = "too few pairs"
	case s.High <= 1:
		s.Outcome = OutcomeMet
	case s.Low > 1:
		s.Outcome = OutcomeNotMet
	}
	return s
}
