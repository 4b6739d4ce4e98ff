package replay

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// verdict.go: the interleaved instrument's statistics. A block's windows
// are compared pair by pair (a policy's window against the foreground
// alone in the windows either side of it, within the same minute, so the
// same machine), and the pairs' ratios are judged by a bootstrap interval
// of their median: met, not met or undecided. Nothing here touches the
// database; everything is read from a Block's stored seconds, so a new
// statistic needs no new run.

// Goals are what a verdict is judged against, and how.
type Goals struct {
	// P99Ratio is the most a policy's p99 may be over foreground
	// alone's: 1.10.
	P99Ratio float64
	// MaxSteal drops a second whose steal is over it: 0.10. Negative
	// keeps every second. A second whose steal is unknown is kept.
	MaxSteal float64
	// MinPairs is the fewest pairs a verdict is given on: 5. A verdict
	// pools its pairs' transactions (DecidePooled), so its resolution
	// comes from the transactions a window holds more than from the
	// pairs' number.
	MinPairs int
	// MinSeconds is the fewest kept seconds a side of a pair needs: 2.
	MinSeconds int
	// Confidence is the bootstrap interval's coverage: 0.90.
	Confidence float64
	// Resamples is the bootstrap's resamples: 2000.
	Resamples int
	// Seed seeds the bootstrap, so a verdict reads the same every time.
	Seed uint64
}

// fill sets every goal left zero to its default.
func (g *Goals) fill() {
	g.P99Ratio = cmp.Or(g.P99Ratio, 1.10)
	g.MaxSteal = cmp.Or(g.MaxSteal, 0.10)
	g.MinPairs = cmp.Or(g.MinPairs, 5)
	g.MinSeconds = cmp.Or(g.MinSeconds, 2)
	if g.Confidence <= 0 || g.Confidence >= 1 {
		g.Confidence = 0.90
	}
	g.Resamples = cmp.Or(g.Resamples, 2000)
}

// stolen reports whether a second is left out for the hypervisor's steal.
func (g Goals) stolen(s Second) bool {
	return g.MaxSteal >= 0 && s.Steal >= 0 && s.Steal > g.MaxSteal
}

// exceedShare is the share of foreground alone's transactions over its
// own p99: the reference an Exceed is divided by.
const exceedShare = 0.01

// Pair is one policy window against the foreground alone in the alone
// windows next to it.
type Pair struct {
	// Window is the policy window's index in Block.Windows.
	Window int
	// P99 is the policy side's p99; AloneP99 the alone side's.
	P99, AloneP99 time.Duration
	// Ratio is P99 over AloneP99; NaN where a side holds no
	// transaction (a block without foreground).
	Ratio float64
	// Exceed is the share of the policy side's transactions over the
	// alone side's own p99; ExceedRatio is Exceed over the 1 % the
	// alone side has there by definition, so 1.0 is no harm.
	Exceed, ExceedRatio float64
	// RowsPerSec is the rows the job cleaned per second of its window,
	// over every second past Dropped, stolen ones included: rows are
	// not a latency, steal does not bias a count of them much (it slows
	// the job a little, not the rows it has cleaned), and leaving those
	// seconds out would only lose part of the window's work.
	RowsPerSec float64
	// Seconds and AloneSeconds are the seconds each side kept;
	// Stolen and AloneStolen those it left out for steal.
	Seconds, AloneSeconds int
	Stolen, AloneStolen   int
	// Transactions and AloneTransactions are the latencies each side's
	// p99 is read from; Failed and AloneFailed the foreground's
	// transactions in the kept seconds that failed or could not start.
	Transactions, AloneTransactions uint64
	Failed, AloneFailed             int64
	// Critical and AloneCritical are the seconds at or over critical,
	// read by the independent sampler, in each side's seconds past
	// Dropped, stolen ones included (see Critical); Span and AloneSpan
	// are those seconds.
	Critical, AloneCritical float64
	Span, AloneSpan         int
	// TotalP99 and AloneTotalP99 are each side's p99 of the whole
	// latency, the measuring process's own wait included; ClientP99 and
	// AloneClientP99 the p99 of that wait alone (Second.Client). P99 and
	// AloneP99 are of the server part where the block split it (what a
	// user of a real primary sees), else of the whole latency. 0 where the
	// block has no split.
	TotalP99, AloneTotalP99   time.Duration
	ClientP99, AloneClientP99 time.Duration
	// lat and aloneLat are each side's judged latencies, for pooling.
	lat, aloneLat *Histogram
}

// PairRatio is a pair's p99 ratio, for Decide.
func PairRatio(p Pair) float64 { return p.Ratio }

// PairExceedRatio is a pair's share over alone's p99 against 1 %, for
// Decide.
func PairExceedRatio(p Pair) float64 { return p.ExceedRatio }

// pairSide is what one side of a pair read from its seconds.
type pairSide struct {
	// lat is the judged latency: the server part where the block split
	// it (Second.Server), else the whole; total the whole, client the
	// measuring process's own wait.
	lat, total   *Histogram
	client       *Histogram
	kept, stolen int
	span         int
	rows         int64
	failed       int64
	critical     float64
}

// add reads window w's seconds past Dropped into s.
func (s *pairSide) add(b *Block, w Window, g Goals) {
	start, end := max(w.Start+w.Dropped, 0), min(w.End, len(b.Seconds))
	for t := start; t < end; t++ {
		sec := b.Seconds[t]
		s.span++
		// Rows and critical count every second past Dropped, stolen
		// ones too: see Pair.RowsPerSec and Critical.
		s.rows += sec.Rows
		s.critical += sec.Critical
		if g.stolen(sec) {
			s.stolen++
			continue
		}
		s.kept++
		s.failed += sec.Failed
		if len(sec.Server.Buckets) > 0 {
			sec.Server.AddTo(s.lat)
		} else {
			sec.Lat.AddTo(s.lat)
		}
		sec.Lat.AddTo(s.total)
		sec.Client.AddTo(s.client)
	}
}

func newPairSide() *pairSide {
	return &pairSide{lat: NewHistogram(), total: NewHistogram(), client: NewHistogram()}
}

// AloneNeighbours returns the indices of the alone windows just before and
// just after window i.
func AloneNeighbours(b *Block, i int) []int {
	var out []int
	for _, j := range []int{i - 1, i + 1} {
		if j >= 0 && j < len(b.Windows) && b.Windows[j].Policy == PolicyAlone {
			out = append(out, j)
		}
	}
	return out
}

// Pairs pairs each window labelled label (as Window.Label names it;
// PolicyAA too) with the alone windows just before and after it (the one
// there is, where only one is alone; no pair where neither is). Each side
// reads its seconds past Dropped and leaves out its own seconds stolen
// over g.MaxSteal; a pair where a side keeps fewer than g.MinSeconds is
// left out. The second result is how many were left out for steal: those
// that would have had enough seconds without it.
//
// The p99s are read between a bucket's edges (log-linearly by rank), not
// at its middle as Histogram.Quantile does: a ratio of two bucket middles
// could only be a power of 1.02, and the 1.10 goal falls between two of
// them.
func Pairs(b *Block, label string, g Goals) ([]Pair, int) {
	g.fill()
	if b == nil || label == PolicyAlone {
		return nil, 0
	}
	var pairs []Pair
	skipped := 0
	for i, w := range b.Windows {
		if w.Policy == PolicyAlone || w.Label() != label {
			continue
		}
		near := AloneNeighbours(b, i)
		if len(near) == 0 {
			continue
		}
		pol, alone := newPairSide(), newPairSide()
		pol.add(b, w, g)
		for _, j := range near {
			alone.add(b, b.Windows[j], g)
		}
		if pol.kept < g.MinSeconds || alone.kept < g.MinSeconds {
			if pol.kept+pol.stolen >= g.MinSeconds && alone.kept+alone.stolen >= g.MinSeconds {
				skipped++
			}
			continue
		}
		p := Pair{
			Window:            i,
			Seconds:           pol.kept,
			AloneSeconds:      alone.kept,
			Stolen:            pol.stolen,
			AloneStolen:       alone.stolen,
			Transactions:      pol.lat.Count(),
			AloneTransactions: alone.lat.Count(),
			Failed:            pol.failed,
			AloneFailed:       alone.failed,
			Critical:          pol.critical,
			AloneCritical:     alone.critical,
			Span:              pol.span,
			AloneSpan:         alone.span,
			RowsPerSec:        float64(pol.rows) / float64(pol.span),
			Ratio:             math.NaN(),
			Exceed:            math.NaN(),
			ExceedRatio:       math.NaN(),
			lat:               pol.lat,
			aloneLat:          alone.lat,
		}
		if pol.client.Count() > 0 && alone.client.Count() > 0 {
			p.TotalP99, p.AloneTotalP99 = usDuration(interpQuantileUs(pol.total, 0.99)), usDuration(interpQuantileUs(alone.total, 0.99))
			p.ClientP99, p.AloneClientP99 = usDuration(interpQuantileUs(pol.client, 0.99)), usDuration(interpQuantileUs(alone.client, 0.99))
		}
		if pol.lat.Count() > 0 && alone.lat.Count() > 0 {
			polUs := interpQuantileUs(pol.lat, 0.99)
			aloneUs := interpQuantileUs(alone.lat, 0.99)
			p.P99 = usDuration(polUs)
			p.AloneP99 = usDuration(aloneUs)
			p.Ratio = polUs / aloneUs
			p.Exceed = shareOver(pol.lat, alone.lat, 0.99)
			p.ExceedRatio = p.Exceed / exceedShare
		}
		pairs = append(pairs, p)
	}
	return pairs, skipped
}

func usDuration(us float64) time.Duration {
	return time.Duration(math.Round(us * float64(time.Microsecond)))
}

// quantilePlace finds h's q-quantile (rank q*n, not rounded up): its
// bucket and how far into it by rank, in (0, 1]. -1 for an empty h.
func quantilePlace(h *Histogram, q float64) (int, float64) {
	if h.n == 0 {
		return -1, 0
	}
	r := q * float64(h.n)
	var seen float64
	last := -1
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		last = i
		if seen+float64(c) >= r {
			return i, (r - seen) / float64(c)
		}
		seen += float64(c)
	}
	return last, 1
}

// interpQuantileUs is h's q-quantile, microseconds, read log-linearly
// inside its bucket (which spans [g^i, g^(i+1))), and no more than the
// largest value.
func interpQuantileUs(h *Histogram, q float64) float64 {
	i, f := quantilePlace(h, q)
	if i < 0 {
		return math.NaN()
	}
	v := math.Pow(histGrowth, float64(i)+f)
	if m := float64(h.max) / float64(time.Microsecond); m > 0 {
		v = min(v, m)
	}
	return v
}

// shareOver is the share of p's values over ref's q-quantile. In the
// bucket the quantile falls in, p is taken to spread as ref does (the
// bucket is 2 % wide), so ref's own share over is exactly 1-q.
func shareOver(p, ref *Histogram, q float64) float64 {
	if p.n == 0 || ref.n == 0 {
		return math.NaN()
	}
	b, f := quantilePlace(ref, q)
	over := float64(p.counts[b]) * (1 - f)
	for _, c := range p.counts[b+1:] {
		over += float64(c)
	}
	return over / float64(p.n)
}

// The three outcomes of a verdict.
const (
	OutcomeMet       = "met"
	OutcomeNotMet    = "not met"
	OutcomeUndecided = "undecided"
)

// Verdict is a goal judged over a policy's pairs.
type Verdict struct {
	// Outcome is OutcomeMet, OutcomeNotMet or OutcomeUndecided.
	Outcome string
	// Median is the pairs' median value; Low and High the bootstrap
	// percentile interval of that median at the goals' confidence.
	// NaN without a pair.
	Median, Low, High float64
	// Pairs is the pairs judged (those whose value is a number).
	Pairs int
	// Goal is the value the pairs were judged against.
	Goal float64
	// SignP is the two-sided exact sign test's p-value of the pairs'
	// values against the goal (values equal to it left out), reported
	// beside the interval; it does not decide.
	SignP float64
	// Reason says why there is no verdict from the interval, if so.
	Reason string
	// OwnLow and OwnHigh are the pairs' own bootstrap interval where
	// Guard widened Low and High by the block's a/a; 0 otherwise.
	OwnLow, OwnHigh float64
}

// String reads like "met: 1.04 [0.98, 1.09], 12 pairs".
func (v Verdict) String() string {
	var s string
	if v.Pairs == 0 {
		s = fmt.Sprintf("%s: no pairs", v.Outcome)
	} else {
		s = fmt.Sprintf("%s: %.2f [%.2f, %.2f], %d pair", v.Outcome, v.Median, v.Low, v.High, v.Pairs)
		if v.Pairs != 1 {
			s += "s"
		}
	}
	if v.Reason != "" {
		s += " (" + v.Reason + ")"
	}
	return s
}

// Decide judges the pairs' values (value of each pair; NaN values are
// left out) against goal, a most: met where the whole bootstrap interval
// of the median is at or under goal, not met where it is all over, and
// undecided where it holds goal or where there are fewer than g.MinPairs
// values. For a goal that is a least (rows), pass the value's reciprocal
// or negation.
//
// The median, not the mean: one window struck by a stall the steal
// filter missed moves a mean of ratios as far as it likes and a median by
// one place. The interval is the bootstrap's percentiles of the median
// over g.Resamples resamples, seeded with g.Seed so a block's verdict
// reads the same every time it is rendered. With 10-20 pairs the percentile
// interval runs a little narrow (it held the true median about 87 % of
// the time at a nominal 90 % on normal data); the sign test's p-value
// beside it is exact.
func Decide(pairs []Pair, value func(Pair) float64, goal float64, g Goals) Verdict {
	g.fill()
	var xs []float64
	for _, p := range pairs {
		if x := value(p); !math.IsNaN(x) && !math.IsInf(x, 0) {
			xs = append(xs, x)
		}
	}
	v := Verdict{
		Outcome: OutcomeUndecided,
		Median:  math.NaN(), Low: math.NaN(), High: math.NaN(),
		Pairs: len(xs), Goal: goal,
		SignP: signTestP(xs, goal),
	}
	if len(xs) > 0 {
		v.Median = medianOf(xs)
		v.Low, v.High = bootstrapMedian(xs, g)
	}
	switch {
	case len(xs) < g.MinPairs:
		v.Reason = fmt.Sprintf("too few pairs: %d of the %d needed", len(xs), g.MinPairs)
	case v.High <= goal:
		v.Outcome = OutcomeMet
	case v.Low > goal:
		v.Outcome = OutcomeNotMet
	}
	return v
}

// medianOf is the middle of xs, or the mean of the middle two. It sorts
// xs in place.
func medianOf(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// bootstrapMedian is the percentile interval of xs's median at
// g.Confidence.
func bootstrapMedian(xs []float64, g Goals) (float64, float64) {
	rng := rand.New(rand.NewPCG(g.Seed, 0x9e3779b97f4a7c15))
	meds := make([]float64, g.Resamples)
	re := make([]float64, len(xs))
	for r := range meds {
		for i := range re {
			re[i] = xs[rng.IntN(len(xs))]
		}
		meds[r] = medianOf(re)
	}
	return percentiles(meds, g.Confidence)
}

// SignTestP is the two-sided exact binomial sign test's p-value of xs
// against x0: under the null half the values fall each side of it.
// Values equal to x0 are left out; 1 when none is left.
func SignTestP(xs []float64, x0 float64) float64 { return signTestP(xs, x0) }

// signTestP is SignTestP.
func signTestP(xs []float64, goal float64) float64 {
	over, under := 0, 0
	for _, x := range xs {
		switch {
		case x > goal:
			over++
		case x < goal:
			under++
		}
	}
	n, k := over+under, min(over, under)
	if n == 0 {
		return 1
	}
	lfn, _ := math.Lgamma(float64(n + 1))
	tail := 0.0
	for i := 0; i <= k; i++ {
		lfi, _ := math.Lgamma(float64(i + 1))
		lfr, _ := math.Lgamma(float64(n - i + 1))
		tail += math.Exp(lfn - lfi - lfr - float64(n)*math.Ln2)
	}
	return min(1, 2*tail)
}

// CheckAA judges the instrument itself: the a/a windows (no job, labelled
// as a policy) against their alone neighbours. Their p99 verdict must be
// met, with an interval narrower than the goal's margin either side of
// 1.0 (0.20 for a 1.10 goal) and not under 1.0 by more than that margin.
// The error says which failed; an interval too wide is met by a longer
// block (more pairs, more transactions a window), never by a looser goal.
func CheckAA(b *Block, g Goals) (Verdict, error) {
	g.fill()
	pairs, skipped := Pairs(b, PolicyAA, g)
	v := DecideP99(pairs, g)
	margin := g.P99Ratio - 1
	const widen = "widen the sample, not the goal"
	var errs []string
	switch v.Outcome {
	case OutcomeNotMet:
		errs = append(errs, fmt.Sprintf("not met: the instrument reads a difference where there is none (%s)", v))
	case OutcomeUndecided:
		why := "its interval holds the goal"
		if v.Reason != "" {
			why = v.Reason
			if skipped > 0 {
				why += fmt.Sprintf(", %d left out for steal", skipped)
			}
		}
		errs = append(errs, fmt.Sprintf("undecided, %s: %s", why, widen))
	}
	if width := v.High - v.Low; v.Pairs > 0 && !(width < 2*margin) {
		errs = append(errs, fmt.Sprintf("interval too wide: %.2f to %.2f is %.2f wide, over %.2f: %s", v.Low, v.High, width, 2*margin, widen))
	}
	if v.Pairs > 0 && v.Low < 1-margin {
		errs = append(errs, fmt.Sprintf("interval not around 1.0: its low end %.2f is under %.2f", v.Low, 1-margin))
	}
	if len(errs) == 0 {
		return v, nil
	}
	return v, errors.New("a/a check: " + strings.Join(errs, "; "))
}

// Guard widens a policy's verdict v by the instrument's own error in the
// same block, read from aa (the a/a windows' verdict on the same goal):
// a policy is not met only where its interval's low end is over the goal
// by more than the a/a read over 1.0 at its high end, and met only where
// its high end is under the goal by more than the a/a read under 1.0 at
// its low end. In log terms each end moves by the a/a's excursion on that
// side: Low/max(aa.High, 1) and High/min(aa.Low, 1).
//
// Why: a median of ten pairs' ratios has a bootstrap interval that runs
// narrow where the seconds' p99 is spiky and the spikes cluster; in
// cpu-hog a policy whose job was paused in every window (no row cleaned)
// read 1.91 [1.17, 3.57], not met, beside an a/a of 1.06 [0.94, 1.44].
// The a/a is that same noise measured with no job at all: a verdict that
// does not clear it is undecided. A block without a/a (or an a/a without
// an interval) leaves v as it is.
func Guard(v, aa Verdict, g Goals) Verdict {
	g.fill()
	if aa.Pairs == 0 || math.IsNaN(aa.Low) || math.IsNaN(aa.High) || v.Pairs == 0 || math.IsNaN(v.Low) || math.IsNaN(v.High) {
		return v
	}
	up, down := max(aa.High, 1), min(aa.Low, 1)
	if up == 1 && down == 1 {
		return v
	}
	v.OwnLow, v.OwnHigh = v.Low, v.High
	v.Low, v.High = v.Low/up, v.High/down
	switch {
	case v.Pairs < g.MinPairs:
		v.Outcome = OutcomeUndecided
	case v.High <= v.Goal:
		v.Outcome = OutcomeMet
	case v.Low > v.Goal:
		v.Outcome = OutcomeNotMet
	default:
		v.Outcome = OutcomeUndecided
		if v.Reason == "" && (v.OwnHigh <= v.Goal || v.OwnLow > v.Goal) {
			v.Reason = fmt.Sprintf("its own interval [%.2f, %.2f] does not clear the a/a's [%.2f, %.2f]", v.OwnLow, v.OwnHigh, aa.Low, aa.High)
		}
	}
	return v
}

// Critical is the seconds at or over critical, read by the independent
// sampler, in label's windows and in the alone windows next to them (each
// counted once), every second past Dropped: steal is not left out, since
// the sampler reads the database's load, not this machine's clock. The
// alone seconds are scaled to as many seconds as the policy's windows
// span, so max(0, policySeconds-aloneSeconds) is the seconds above
// critical the policy added that the foreground alone did not also spend.
func Critical(b *Block, label string, g Goals) (policySeconds, aloneSeconds float64) {
	g.fill()
	if b == nil || label == PolicyAlone {
		return 0, 0
	}
	all := Goals{MaxSteal: -1}
	pol, alone := newPairSide(), newPairSide()
	seen := map[int]bool{}
	for i, w := range b.Windows {
		if w.Policy == PolicyAlone || w.Label() != label {
			continue
		}
		pol.add(b, w, all)
		for _, j := range AloneNeighbours(b, i) {
			if !seen[j] {
				seen[j] = true
				alone.add(b, b.Windows[j], all)
			}
		}
	}
	if alone.span == 0 {
		return pol.critical, 0
	}
	return pol.critical, alone.critical * float64(pol.span) / float64(alone.span)
}

// PooledP99Ratio is the p99 of pol's transactions over alone's, for
// DecidePooled.
func PooledP99Ratio(pol, alone *Histogram) float64 {
	return interpQuantileUs(pol, 0.99) / interpQuantileUs(alone, 0.99)
}

// PooledExceedRatio is the share of pol's transactions over alone's p99,
// over the 1 % alone has there, for DecidePooled.
func PooledExceedRatio(pol, alone *Histogram) float64 {
	return shareOver(pol, alone, 0.99) / exceedShare
}

// DecidePooled judges stat of the pairs' transactions pooled: every
// policy window's against every alone neighbour's (each pair's alone
// side once), with a bootstrap interval that resamples whole pairs, so
// the interval keeps the windows' own spread (the machine's drift, a
// stall) and not only the transactions'. Met where the interval is at or
// under goal, not met where it is over, undecided where it holds goal or
// with fewer than g.MinPairs pairs. Verdict.Median is the pooled value.
//
// Why pooled and not the median of the pairs' ratios: a window's p99 is
// its 1 % slowest, so a window of a quiet foreground's 2,000 transactions
// reads it off 20 values, and the ratio of two such swings by a quarter
// between neighbours with no job at all. Pooling six pairs reads it off
// 120; the pairs still carry the interval.
func DecidePooled(pairs []Pair, stat func(pol, alone *Histogram) float64, goal float64, g Goals) Verdict {
	g.fill()
	var ps []Pair
	var ratios []float64
	for _, p := range pairs {
		if p.lat != nil && p.aloneLat != nil && p.lat.Count() > 0 && p.aloneLat.Count() > 0 {
			ps = append(ps, p)
			ratios = append(ratios, p.Ratio)
		}
	}
	v := Verdict{Outcome: OutcomeUndecided, Median: math.NaN(), Low: math.NaN(), High: math.NaN(),
		Pairs: len(ps), Goal: goal, SignP: signTestP(ratios, goal)}
	if len(ps) > 0 {
		v.Median = pooledStat(ps, nil, stat)
		v.Low, v.High = bootstrapPooled(ps, stat, g)
	}
	switch {
	case len(ps) < g.MinPairs:
		v.Reason = fmt.Sprintf("too few pairs: %d of the %d needed", len(ps), g.MinPairs)
	case v.High <= goal:
		v.Outcome = OutcomeMet
	case v.Low > goal:
		v.Outcome = OutcomeNotMet
	}
	return v
}

// pooledStat is stat of the pairs idx names (all of ps where idx is nil)
// pooled.
func pooledStat(ps []Pair, idx []int, stat func(pol, alone *Histogram) float64) float64 {
	pol, alone := NewHistogram(), NewHistogram()
	if idx == nil {
		for _, p := range ps {
			pol.Merge(p.lat)
			alone.Merge(p.aloneLat)
		}
	} else {
		for _, i := range idx {
			pol.Merge(ps[i].lat)
			alone.Merge(ps[i].aloneLat)
		}
	}
	return stat(pol, alone)
}

// bootstrapPooled is the percentile interval of the pooled stat at
// g.Confidence, resampling whole pairs.
func bootstrapPooled(ps []Pair, stat func(pol, alone *Histogram) float64, g Goals) (float64, float64) {
	rng := rand.New(rand.NewPCG(g.Seed, 0x9e3779b97f4a7c15))
	vals := make([]float64, 0, g.Resamples)
	idx := make([]int, len(ps))
	for range g.Resamples {
		for i := range idx {
			idx[i] = rng.IntN(len(ps))
		}
		if x := pooledStat(ps, idx, stat); verdictFinite(x) {
			vals = append(vals, x)
		}
	}
	return percentiles(vals, g.Confidence)
}

// percentiles is the central interval of vals at confidence; NaN, NaN
// for none. It sorts vals in place.
func percentiles(vals []float64, confidence float64) (float64, float64) {
	if len(vals) == 0 {
		return math.NaN(), math.NaN()
	}
	slices.Sort(vals)
	tail := (1 - confidence) / 2
	lo := int(math.Floor(tail * float64(len(vals))))
	hi := int(math.Ceil((1-tail)*float64(len(vals)))) - 1
	lo = min(max(lo, 0), len(vals)-1)
	hi = min(max(hi, lo), len(vals)-1)
	return vals[lo], vals[hi]
}

// MedianPairs is the pairs from which a verdict takes the median of the
// pairs' ratios rather than pooling them (DecideP99).
const MedianPairs = 10

// DecideP99 judges the pairs' p99 ratio against g.P99Ratio: with
// MedianPairs or more (many short windows, each with thousands of
// transactions) the median of the pairs' ratios, which one window struck
// by a stall moves by one place; with fewer (long windows, as a
// closed-loop policy's) the pairs pooled, whose p99 is read off enough
// transactions where a window's own is not. In the short replay's 2 s
// windows a checkpoint's stall in one alone window took the pooled ratio
// of unthrottled to 0.64 where the median read it over 3.
func DecideP99(pairs []Pair, g Goals) Verdict {
	g.fill()
	if len(usablePairs(pairs)) >= MedianPairs {
		return Decide(pairs, PairRatio, g.P99Ratio, g)
	}
	return DecidePooled(pairs, PooledP99Ratio, g.P99Ratio, g)
}

// DecideExceed is DecideP99 for the share over alone's p99.
func DecideExceed(pairs []Pair, g Goals) Verdict {
	g.fill()
	if len(usablePairs(pairs)) >= MedianPairs {
		return Decide(pairs, PairExceedRatio, g.P99Ratio, g)
	}
	return DecidePooled(pairs, PooledExceedRatio, g.P99Ratio, g)
}
