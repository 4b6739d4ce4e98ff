package replay

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// Pooling: with few transactions a window, the median of the pairs'
// ratios swings where the pooled ratio holds; both read a slower policy
// as slower.
func TestDecidePooledIsNarrowerThanTheMedianOfRatios(t *testing.T) {
	sp := synth{seed: 11, winSec: 4, dropped: 1, perSec: 100}
	b := sp.block(interleaved(Window{Policy: PolicyAA}, 6))
	pairs, _ := Pairs(b, PolicyAA, Goals{})
	med := Decide(pairs, PairRatio, 1.10, Goals{MinPairs: 1})
	pooled := DecidePooled(pairs, PooledP99Ratio, 1.10, Goals{})
	if pooled.High-pooled.Low >= med.High-med.Low {
		t.Errorf("pooled %v is no narrower than the median of ratios %v", pooled, med)
	}
	if math.Abs(pooled.Median-1) > 0.15 || pooled.Low > pooled.Median || pooled.High < pooled.Median {
		t.Errorf("a/a pooled %v: want about 1.0 inside its interval", pooled)
	}
	slow := synth{seed: 12, winSec: 4, dropped: 1, perSec: 100, mult: slower(PolicyUnthrottled, 1.6)}
	sb := slow.block(interleaved(Window{Policy: PolicyUnthrottled}, 6))
	sp2, _ := Pairs(sb, PolicyUnthrottled, Goals{})
	v := DecidePooled(sp2, PooledP99Ratio, 1.10, Goals{})
	if v.Outcome != OutcomeNotMet || math.Abs(v.Median-1.6) > 0.15 {
		t.Errorf("1.6x slower, pooled: %v; want not met near 1.6", v)
	}
	ex := DecidePooled(sp2, PooledExceedRatio, 1.10, Goals{})
	if ex.Outcome != OutcomeNotMet {
		t.Errorf("1.6x slower, share over: %v; want not met", ex)
	}
}

// frontierBlock lays fixed rates whose harm grows with their rows, and a
// policy "adaptive" of the given rows and slowdown.
func frontierBlock(seed uint64, adaptiveRows int64, adaptiveMult float64) *Block {
	rates := []float64{1, 2, 4, 8}
	layout := interleaved(Window{Policy: PolicyAdaptive}, 6)
	for _, r := range rates {
		layout = thenInterleaved(layout, Window{Policy: PolicyFixed, Rate: r}, 3)
	}
	rateOf := func(w int) float64 { return layout[w].Rate }
	sp := synth{seed: seed, winSec: 6, dropped: 1, perSec: 400,
		// A fixed rate of r batches a second cleans 1,000 r rows and
		// slows the foreground by 1 + r/20: 1.05 at 1, 1.40 at 8.
		mult: func(w int, p string, _ int) float64 {
			switch p {
			case PolicyFixed:
				return 1 + rateOf(w)/20
			case PolicyAdaptive:
				return adaptiveMult
			}
			return 1
		},
		rows: func(w int, p string, _ int) int64 {
			switch p {
			case PolicyFixed:
				return int64(1000 * rateOf(w))
			case PolicyAdaptive:
				return adaptiveRows
			}
			return 0
		},
	}
	return sp.block(layout)
}

func TestFrontierReadsTheFixedRatesAsACurve(t *testing.T) {
	b := frontierBlock(21, 4000, 1.2)
	f := FrontierOf(b, Goals{})
	if !f.OK || len(f.Points) != 4 {
		t.Fatalf("frontier %+v: want four points", f)
	}
	for i, p := range f.Points {
		want := 1 + p.Rate/20
		if math.Abs(p.Ratio-want) > 0.1 || p.Pairs != 3 || p.RowsPerSec != 1000*p.Rate {
			t.Errorf("point %d: %+v; want ratio about %.2f over 3 pairs at %.0f rows/s", i, p, want, 1000*p.Rate)
		}
	}
	// The curve crosses 1.10 at 2 batches a second: 2,000 rows.
	if f.Oracle < 1200 || f.Oracle > 3000 || !(f.OracleLow <= f.Oracle && f.Oracle <= f.OracleHigh) {
		t.Errorf("oracle %.0f [%.0f, %.0f]: want about 2,000 inside its interval", f.Oracle, f.OracleLow, f.OracleHigh)
	}
}

func TestStandingOfAPolicyOnBothSidesOfTheFrontier(t *testing.T) {
	// At 4,000 rows the curve reads 1.20: a policy at 1.00 is beyond it,
	// one at 1.60 above it, one at 1.20 on it.
	beyond := StandingOf(frontierBlock(31, 4000, 1.0), PolicyAdaptive, Goals{})
	if beyond.Outcome != OutcomeMet || beyond.High > 1 {
		t.Errorf("beyond the frontier: %+v; want met", beyond)
	}
	above := StandingOf(frontierBlock(32, 4000, 1.6), PolicyAdaptive, Goals{})
	if above.Outcome != OutcomeNotMet || above.Low <= 1 || math.Abs(above.Median-1.6/1.2) > 0.15 {
		t.Errorf("above the frontier: %+v; want not met, about 1.33", above)
	}
	if math.Abs(above.OfOracle-2) > 0.8 || !(above.OfOracleLow <= above.OfOracle && above.OfOracle <= above.OfOracleHigh) {
		t.Errorf("rows over the oracle's %.2f [%.2f, %.2f]: want about 2 inside its interval", above.OfOracle, above.OfOracleLow, above.OfOracleHigh)
	}
	// No fixed rate: no standing, and it says why.
	sp := synth{seed: 33, winSec: 6, dropped: 1, perSec: 300}
	none := StandingOf(sp.block(interleaved(Window{Policy: PolicyAdaptive}, 6)), PolicyAdaptive, Goals{})
	if none.Outcome != OutcomeUndecided || !strings.Contains(none.Reason, "no fixed rates") {
		t.Errorf("no fixed rates: %+v", none)
	}
}

// The client part is the generator's lateness and a free worker's
// wake-up; waiting for a busy worker is the database's.
func TestClientWaitSplitsTheMeasuringProcessFromTheDatabase(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	cases := []struct {
		name                   string
		at, sent, free, picked time.Time
		want                   time.Duration
	}{
		{"on time, a free worker at once", ms(0), ms(0), ms(-5), ms(0), 0},
		{"the generator 3 ms late", ms(0), ms(3), ms(-5), ms(3), 3 * time.Millisecond},
		{"a free worker woke 2 ms after", ms(0), ms(1), ms(-5), ms(3), 3 * time.Millisecond},
		{"every worker busy on the database for 10 ms", ms(0), ms(0), ms(10), ms(10), 0},
		{"busy for 10 ms, then 1 ms to pick it up", ms(0), ms(0), ms(10), ms(11), time.Millisecond},
	}
	for _, c := range cases {
		if got := clientWait(c.at, c.sent, c.free, c.picked); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	r := newRecorder(t0)
	r.recordSplit(ms(10), 8*time.Millisecond, 3*time.Millisecond, nil)
	r.recordSplit(ms(20), 4*time.Millisecond, 9*time.Millisecond, nil) // more than the whole: capped
	if c, s := r.client[0], r.server[0]; c.Count() != 2 || s.Count() != 2 {
		t.Fatalf("split counts %d and %d, want 2 each", c.Count(), s.Count())
	}
	if got := r.server[0].Quantile(1); got != 5*time.Millisecond {
		t.Errorf("server part's largest %v, want 5ms (8 - 3)", got)
	}
	if got := r.client[0].Quantile(1); got != 4*time.Millisecond {
		t.Errorf("client part's largest %v, want 4ms (capped at the whole)", got)
	}
}

// The verdicts judge the server part where a block has the split.
func TestPairsJudgeTheServerPart(t *testing.T) {
	sp := synth{seed: 41, winSec: 4, dropped: 1, perSec: 200, mult: slower(PolicyUnthrottled, 2)}
	b := sp.block(interleaved(Window{Policy: PolicyUnthrottled}, 6))
	// The server part is the alone windows' latency everywhere: the
	// policy's excess is all the client's.
	for _, w := range b.Windows {
		for t := w.Start; t < w.End; t++ {
			sec := &b.Seconds[t]
			h, c := NewHistogram(), NewHistogram()
			for range 200 {
				h.Record(2 * time.Millisecond)
				c.Record(time.Millisecond)
			}
			sec.Server, sec.Client = Sparse(h), Sparse(c)
		}
	}
	pairs, _ := Pairs(b, PolicyUnthrottled, Goals{})
	v := DecidePooled(pairs, PooledP99Ratio, 1.10, Goals{})
	if v.Outcome != OutcomeMet || math.Abs(v.Median-1) > 0.03 {
		t.Errorf("server part alike on both sides: %v; want met at 1.0", v)
	}
	if pairs[0].TotalP99 <= pairs[0].AloneTotalP99 || pairs[0].ClientP99 != pairs[0].AloneClientP99 {
		t.Errorf("pair %+v: want the whole latency slower in the policy's window, the client part alike", pairs[0])
	}
}

func TestScheduleLayoutGivesEachKindItsLengthAndPairs(t *testing.T) {
	kinds := []Window{{Policy: PolicyAA}, {Policy: PolicyAdaptive}, {Policy: PolicyUnthrottled}, {Policy: PolicyFixed, Rate: 2}, {Policy: PolicyFixed, Rate: 8}}
	lay := Layout{Pairs: 6, OpenPairs: 3, FixedPairs: 3, Window: 10, OpenWindow: 5, Alone: 4, AloneDrop: 1}
	ws := ScheduleLayout(kinds, lay, true, 3)
	count, secs := map[string]int{}, map[string]int{}
	for i, w := range ws {
		if i > 0 && w.Start != ws[i-1].End {
			t.Fatalf("window %d starts at %d, after %d", i, w.Start, ws[i-1].End)
		}
		count[w.Label()]++
		secs[w.Label()] = w.End - w.Start
	}
	want := map[string][2]int{PolicyAlone: {22, 4}, PolicyAA: {6, 10}, PolicyAdaptive: {6, 10}, PolicyUnthrottled: {3, 5}, "fixed-2": {3, 5}, "fixed-8": {3, 5}}
	for k, w := range want {
		if count[k] != w[0] || secs[k] != w[1] {
			t.Errorf("%s: %d windows of %d s, want %d of %d", k, count[k], secs[k], w[0], w[1])
		}
	}
}

// A paused policy (no row cleaned) whose windows read as noisy as the
// a/a's is not behind the frontier: its standing is guarded by the a/a's
// excursion, as its p99 verdict is.
func TestFrontierStandingClearsTheAA(t *testing.T) {
	layout := thenInterleaved(interleaved(Window{Policy: PolicyAA}, 6), Window{Policy: PolicyAdaptive}, 6)
	for _, r := range []float64{1, 2, 4, 8} {
		layout = thenInterleaved(layout, Window{Policy: PolicyFixed, Rate: r}, 3)
	}
	sp := synth{seed: 41, winSec: 6, dropped: 1, perSec: 400,
		mult: func(w int, p string, _ int) float64 {
			switch p {
			case PolicyFixed:
				return 1 + layout[w].Rate/20
			case PolicyAA, PolicyAdaptive:
				// The instrument's own noise: a window in two reads a
				// third slower with no job at all.
				if w%4 == 1 {
					return 1.35
				}
				return 1.15
			}
			return 1
		},
		rows: func(w int, p string, _ int) int64 {
			if p == PolicyFixed {
				return int64(1000 * layout[w].Rate)
			}
			return 0
		},
	}
	b := sp.block(layout)
	own := StandingOf(b, PolicyAdaptive, Goals{})
	if own.Outcome != OutcomeNotMet {
		t.Fatalf("unguarded standing %+v: want not met, or the test shows nothing", own)
	}
	r := Evaluate(b, Goals{})
	i := slices.IndexFunc(r.Policies, func(p PolicyResult) bool { return p.Policy == PolicyAdaptive })
	if i < 0 {
		t.Fatal("no adaptive row")
	}
	got := r.Policies[i].Frontier
	if got.Outcome != OutcomeUndecided || got.OwnLow != own.Low || !(got.Low < own.Low) {
		t.Errorf("guarded standing %+v; want undecided, its own interval [%.2f, %.2f] kept and widened", got.Verdict, own.Low, own.High)
	}
}

// idle's jobs run at their ceiling, quiet's and write-heavy's faster than
// under a full foreground: their blocks get bigger tables, the rest the
// default, whose setup is a part of a scenario's eight minutes.
func TestBlockRowsForIdle(t *testing.T) {
	if got := BlockRowsFor([]string{"surge", "cpu-hog"}, DefaultBlockRows); got != DefaultBlockRows {
		t.Errorf("surge and cpu-hog: %d rows; want the default %d", got, DefaultBlockRows)
	}
	quiet := BlockRowsFor([]string{"surge", "quiet"}, DefaultBlockRows)
	if quiet <= DefaultBlockRows || BlockRowsFor([]string{"write-heavy"}, DefaultBlockRows) != quiet {
		t.Errorf("with quiet: %d rows; want more than the default %d, as write-heavy", quiet, DefaultBlockRows)
	}
	idle := BlockRowsFor([]string{"surge", "idle"}, DefaultBlockRows)
	if idle <= quiet {
		t.Errorf("with idle: %d rows; want more than quiet's %d", idle, quiet)
	}
	if got := BlockRowsFor([]string{"idle"}, 2*idle); got != 2*idle {
		t.Errorf("asked for %d: %d; want what was asked", 2*idle, got)
	}
}

// The pairs an a/a needs for the goal's width grow as the square of how
// much too wide it is, at the same spread between pairs.
func TestAAPairsForGrowsAsTheSquareOfTheWidth(t *testing.T) {
	for _, c := range []struct {
		w     float64
		pairs int
		want  int
	}{
		{0.40, 6, 24}, // twice too wide: four times the pairs
		{0.21, 6, 7},
		{0.20, 6, 6}, // narrow enough: as run
		{0.11, 6, 6},
		{math.NaN(), 6, 0},
		{0.40, 0, 0},
	} {
		if got := AAPairsFor(c.w, c.pairs, 0.20); got != c.want {
			t.Errorf("width %.2f at %d pairs: %d pairs; want %d", c.w, c.pairs, got, c.want)
		}
	}
}

// What held a closed-loop policy's job is counted over its own windows
// only, the largest share first.
func TestWhySharesCountsThePolicysSeconds(t *testing.T) {
	b := &Block{
		Windows: []Window{{Policy: PolicyAlone, Start: 0, End: 2}, {Policy: PolicyAdaptive, Start: 2, End: 6}, {Policy: PolicyAlone, Start: 6, End: 8}},
		Seconds: []Second{{Why: "growth"}, {}, {Why: "critical:primary_load"}, {Why: "critical:primary_load"}, {Why: "critical:primary_load"}, {Why: "cut:foreground_latency"}, {Why: "growth"}, {}},
	}
	if got, want := WhyShares(b, PolicyAdaptive), "critical:primary_load 75 %, cut:foreground_latency 25 %"; got != want {
		t.Errorf("WhyShares: %q; want %q", got, want)
	}
	if got := WhyShares(b, PolicyAA); got != "" {
		t.Errorf("a policy with no windows: %q; want empty", got)
	}
}

// The curve ends at unthrottled, the open-loop policy at the most rows: a
// controller cleaning more rows than the fastest fixed rate is judged on
// the curve between that rate and unthrottled, not held to the fastest
// fixed rate's harm. Without fixed rates there is no curve.
func TestFrontierEndsAtUnthrottled(t *testing.T) {
	layout := thenInterleaved(interleaved(Window{Policy: PolicyAdaptive}, 6), Window{Policy: PolicyUnthrottled}, 3)
	for _, r := range []float64{1, 2} {
		layout = thenInterleaved(layout, Window{Policy: PolicyFixed, Rate: r}, 3)
	}
	// Fixed rates: 1,000 r rows at 1 + r/20 (1.05, 1.10); unthrottled:
	// 20,000 rows at 2.0; adaptive: 11,000 rows at 1.55, on the straight
	// line from fixed-2 to unthrottled.
	sp := synth{seed: 51, winSec: 6, dropped: 1, perSec: 400,
		mult: func(w int, p string, _ int) float64 {
			switch p {
			case PolicyFixed:
				return 1 + layout[w].Rate/20
			case PolicyUnthrottled:
				return 2
			case PolicyAdaptive:
				return 1.55
			}
			return 1
		},
		rows: func(w int, p string, _ int) int64 {
			switch p {
			case PolicyFixed:
				return int64(1000 * layout[w].Rate)
			case PolicyUnthrottled:
				return 20000
			case PolicyAdaptive:
				return 11000
			}
			return 0
		},
	}
	b := sp.block(layout)
	f := FrontierOf(b, Goals{})
	if !f.OK || len(f.Points) != 3 || f.Points[2].Label != PolicyUnthrottled || f.Points[2].RowsPerSec != 20000 {
		t.Fatalf("frontier points %+v: want fixed-1, fixed-2, then unthrottled at 20,000 rows/s", f.Points)
	}
	// The curve crosses 1.10 at fixed-2 (2,000 rows), or just past it.
	if f.Oracle < 1500 || f.Oracle > 4000 {
		t.Errorf("oracle %.0f rows/s: want about 2,000", f.Oracle)
	}
	s := StandingOf(b, PolicyAdaptive, Goals{})
	// On the line: about 1.0. Held flat at fixed-2's 1.10 it would read
	// about 1.41, not met.
	if math.Abs(s.Median-1) > 0.12 || s.Outcome == OutcomeNotMet {
		t.Errorf("adaptive at 11,000 rows/s and 1.55: standing %v; want about 1.0 (the curve between fixed-2 and unthrottled), not 1.41", s.Verdict)
	}
	// Unthrottled alone is no curve.
	if f := FrontierOf(sp.block(interleaved(Window{Policy: PolicyUnthrottled}, 3)), Goals{}); f.OK {
		t.Errorf("a block with unthrottled and no fixed rate: frontier %+v; want none", f)
	}
}
