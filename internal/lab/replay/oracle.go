package replay

import (
	"cmp"
	"math"
	"slices"
)

// RatePoint is one fixed rate's result: the median p99 ratio of its pairs
// and the median rows it cleaned per second.
type RatePoint struct {
	Rate, Ratio, RowsPerSec float64
}

// Oracle is the hindsight oracle: the most a fixed rate could have
// cleaned while keeping the p99 ratio within goal, had the right rate
// been known beforehand. The ratio and the rows are each fitted as a
// non-decreasing curve of the rate (isotonic regression: a faster job
// does not make the foreground faster nor clean fewer rows, so what
// says otherwise is noise), and read piecewise linearly between the
// fitted points, from rate 0 (ratio 1.0, no rows). rate is the largest
// rate whose fitted ratio is within goal, no more than the fastest one
// measured (0 where even the slowest is over goal); rowsPerSec the fitted
// rows there. Points with no rate over 0, or with a ratio or rows that is
// not a number, are left out; ok is false with none left.
func Oracle(points []RatePoint, goal float64) (rowsPerSec, rate float64, ok bool) {
	var pts []RatePoint
	for _, p := range points {
		if p.Rate > 0 && verdictFinite(p.Rate) && verdictFinite(p.Ratio) && verdictFinite(p.RowsPerSec) && p.RowsPerSec >= 0 {
			pts = append(pts, p)
		}
	}
	if len(pts) == 0 {
		return 0, 0, false
	}
	slices.SortStableFunc(pts, func(a, b RatePoint) int { return cmp.Compare(a.Rate, b.Rate) })
	x := make([]float64, len(pts))
	ratio := make([]float64, len(pts))
	rows := make([]float64, len(pts))
	for i, p := range pts {
		x[i], ratio[i], rows[i] = p.Rate, p.Ratio, p.RowsPerSec
	}
	fr, fw := FitIsotonic(x, ratio), FitIsotonic(x, rows)
	// The knots: rate 0, then each distinct rate (tied rates are fitted
	// to one value).
	kx, kr, kw := []float64{0}, []float64{1}, []float64{0}
	for i := range x {
		if x[i] == kx[len(kx)-1] {
			continue
		}
		kx, kr, kw = append(kx, x[i]), append(kr, fr[i]), append(kw, fw[i])
	}
	last := len(kx) - 1
	if kr[last] <= goal {
		return kw[last], kx[last], true
	}
	for i := last - 1; i >= 0; i-- {
		if kr[i] > goal {
			continue
		}
		// The fitted ratio crosses goal between knots i and i+1.
		t := (goal - kr[i]) / (kr[i+1] - kr[i])
		rate = kx[i] + t*(kx[i+1]-kx[i])
		return kw[i] + t*(kw[i+1]-kw[i]), rate, true
	}
	return 0, 0, true
}

func verdictFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// FitIsotonic is the least-squares non-decreasing fit of y as a function
// of x (pool adjacent violators), returned in the order of its
// arguments. Values at the same x are fitted to one value.
func FitIsotonic(x, y []float64) []float64 {
	n := min(len(x), len(y))
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(x[a], x[b]) })
	// Each block is a run of points in x's order, fitted to its mean.
	type block struct {
		sum, w     float64
		start, end int // into order, [start, end)
	}
	var blocks []block
	for k := 0; k < n; {
		b := block{start: k}
		for k < n && (k == b.start || x[order[k]] == x[order[b.start]]) {
			b.sum += y[order[k]]
			b.w++
			k++
		}
		b.end = k
		blocks = append(blocks, b)
		for len(blocks) > 1 {
			p, c := blocks[len(blocks)-2], blocks[len(blocks)-1]
			if p.sum/p.w <= c.sum/c.w {
				break
			}
			blocks = append(blocks[:len(blocks)-2], block{p.sum + c.sum, p.w + c.w, p.start, c.end})
		}
	}
	fit := make([]float64, n)
	for _, b := range blocks {
		for k := b.start; k < b.end; k++ {
			fit[order[k]] = b.sum / b.w
		}
	}
	return fit
}
