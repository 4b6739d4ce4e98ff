package replay

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// synth describes a synthetic block: windows of winSec seconds, the
// first dropped of them left out, perSec foreground transactions a
// second drawn around 2 ms (log-normal, sigma 0.4) times mult.
type synth struct {
	seed            uint64
	winSec, dropped int
	perSec          int
	// Each is read for window w (its index), policy p, second s from the
	// window's start; nil is 1x latency, no steal, no rows, no critical.
	mult  func(w int, p string, s int) float64
	steal func(w int, p string, s int) float64
	rows  func(w int, p string, s int) int64
	crit  func(w int, p string, s int) float64
}

// interleaved lays n windows of policy between n+1 alone windows.
func interleaved(policy Window, n int) []Window {
	return thenInterleaved([]Window{{Policy: PolicyAlone}}, policy, n)
}

// thenInterleaved appends to ws (which ends in an alone window) n windows
// of policy, each followed by an alone window.
func thenInterleaved(ws []Window, policy Window, n int) []Window {
	for range n {
		ws = append(ws, policy, Window{Policy: PolicyAlone})
	}
	return ws
}

func (sp synth) block(layout []Window) *Block {
	rng := rand.New(rand.NewPCG(sp.seed, 7))
	b := &Block{Scenario: "synthetic", Rate: float64(sp.perSec), WindowSeconds: sp.winSec, Seed: sp.seed}
	for w, tpl := range layout {
		win := tpl
		win.Start, win.End, win.Dropped = len(b.Seconds), len(b.Seconds)+sp.winSec, sp.dropped
		for s := range sp.winSec {
			m := 1.0
			if sp.mult != nil {
				m = sp.mult(w, win.Policy, s)
			}
			h := NewHistogram()
			for range sp.perSec {
				ms := 2 * math.Exp(0.4*rng.NormFloat64()) * m
				h.Record(time.Duration(ms * float64(time.Millisecond)))
			}
			sec := Second{T: len(b.Seconds), Lat: Sparse(h), Load: 0.5}
			if sp.steal != nil {
				sec.Steal = sp.steal(w, win.Policy, s)
			}
			if sp.rows != nil {
				sec.Rows = sp.rows(w, win.Policy, s)
			}
			if sp.crit != nil {
				sec.Critical = sp.crit(w, win.Policy, s)
			}
			b.Seconds = append(b.Seconds, sec)
		}
		b.Windows = append(b.Windows, win)
	}
	if err := b.check(); err != nil {
		panic(err)
	}
	return b
}

// slower makes windows of policy f times slower.
func slower(policy string, f float64) func(int, string, int) float64 {
	return func(_ int, p string, _ int) float64 {
		if p == policy {
			return f
		}
		return 1
	}
}

func TestVerdictAAIsMetAroundOne(t *testing.T) {
	sp := synth{seed: 1, winSec: 6, dropped: 1, perSec: 300}
	b := sp.block(interleaved(Window{Policy: PolicyAA}, 20))
	v, err := CheckAA(b, Goals{})
	if err != nil {
		t.Fatalf("a/a check: %v", err)
	}
	if v.Outcome != OutcomeMet || v.Pairs != 20 {
		t.Errorf("a/a verdict %v, want met over 20 pairs", v)
	}
	if w := v.High - v.Low; w >= 0.20 || math.Abs(v.Median-1) > 0.05 || v.Low > v.Median || v.High < v.Median {
		t.Errorf("a/a interval %v: want a median near 1.0 inside an interval under 0.20 wide", v)
	}
	pairs, _ := Pairs(b, PolicyAA, Goals{})
	ex := Decide(pairs, PairExceedRatio, 1.10, Goals{})
	if math.Abs(ex.Median-1) > 0.2 {
		t.Errorf("a/a share over alone's p99: %v, want about 1.0 (1 %% of transactions)", ex)
	}
}

func TestVerdictSlowerPolicyIsNotMet(t *testing.T) {
	sp := synth{seed: 2, winSec: 6, dropped: 1, perSec: 300, mult: slower(PolicyUnthrottled, 1.5)}
	b := sp.block(interleaved(Window{Policy: PolicyUnthrottled}, 12))
	pairs, skipped := Pairs(b, PolicyUnthrottled, Goals{})
	if len(pairs) != 12 || skipped != 0 {
		t.Fatalf("%d pairs, %d skipped; want 12, 0", len(pairs), skipped)
	}
	v := Decide(pairs, PairRatio, 1.10, Goals{})
	if v.Outcome != OutcomeNotMet || v.Low <= 1.10 {
		t.Errorf("1.5x slower: %v, want not met", v)
	}
	if math.Abs(v.Median-1.5) > 0.1 {
		t.Errorf("1.5x slower reads a median ratio of %.3f", v.Median)
	}
	if v.SignP > 0.001 {
		t.Errorf("12 of 12 pairs over the goal: sign test p %.4f, want 2/4096", v.SignP)
	}
	ex := Decide(pairs, PairExceedRatio, 1.10, Goals{})
	if ex.Outcome != OutcomeNotMet || ex.Median < 5 {
		t.Errorf("1.5x slower: share over alone's p99 %v, want far over 1 %%", ex)
	}
	for _, p := range pairs {
		if p.P99 <= p.AloneP99 || p.Transactions != 5*300 || p.AloneTransactions != 2*5*300 {
			t.Fatalf("pair %+v", p)
		}
	}
}

func TestVerdictAtTheGoalIsUndecided(t *testing.T) {
	sp := synth{seed: 3, winSec: 6, dropped: 1, perSec: 300, mult: slower(PolicyAdaptive, 1.10)}
	b := sp.block(interleaved(Window{Policy: PolicyAdaptive}, 15))
	pairs, _ := Pairs(b, PolicyAdaptive, Goals{})
	v := Decide(pairs, PairRatio, 1.10, Goals{})
	if v.Outcome != OutcomeUndecided || v.Reason != "" {
		t.Errorf("at the goal: %v, want undecided with the interval holding 1.10", v)
	}
	if !(v.Low <= 1.10 && v.High > 1.10) {
		t.Errorf("interval [%.3f, %.3f] does not hold the goal", v.Low, v.High)
	}
}

func TestPairsDropStolenSecondsAndTheFirstAfterASwitch(t *testing.T) {
	// In each adaptive window, second 0 (dropped after the switch) is 10x
	// slower, and second 3 is 5x slower while the hypervisor took 30 %.
	// Second 4's steal is unknown and it is kept.
	policy := PolicyAdaptive
	sp := synth{seed: 4, winSec: 6, dropped: 1, perSec: 300,
		mult: func(_ int, p string, s int) float64 {
			switch {
			case p != policy:
				return 1
			case s == 0:
				return 10
			case s == 3:
				return 5
			}
			return 1
		},
		steal: func(_ int, p string, s int) float64 {
			switch {
			case p == policy && s == 3:
				return 0.30
			case s == 4:
				return stealUnknown
			}
			return 0.02
		},
		rows: func(_ int, p string, s int) int64 {
			if p == policy {
				return 100
			}
			return 0
		},
	}
	b := sp.block(interleaved(Window{Policy: policy}, 12))
	pairs, skipped := Pairs(b, policy, Goals{})
	if len(pairs) != 12 || skipped != 0 {
		t.Fatalf("%d pairs, %d skipped; want 12, 0", len(pairs), skipped)
	}
	p := pairs[0]
	if p.Seconds != 4 || p.Stolen != 1 || p.AloneSeconds != 10 || p.AloneStolen != 0 || p.Span != 5 {
		t.Errorf("pair %+v: want 4 of 5 seconds kept on the policy side, 10 on alone's", p)
	}
	if p.RowsPerSec != 100 {
		t.Errorf("rows per second %v, want 100 (the stolen second's rows count)", p.RowsPerSec)
	}
	if v := Decide(pairs, PairRatio, 1.10, Goals{}); v.Outcome != OutcomeMet {
		t.Errorf("stolen seconds left out: %v, want met", v)
	}
	kept, _ := Pairs(b, policy, Goals{MaxSteal: -1})
	if v := Decide(kept, PairRatio, 1.10, Goals{}); v.Outcome != OutcomeNotMet {
		t.Errorf("stolen seconds kept: %v, want not met", v)
	}

	// A window stolen throughout is no pair, and is counted.
	sp.steal = func(w int, p string, _ int) float64 {
		if w == 1 {
			return 0.5
		}
		return 0
	}
	b = sp.block(interleaved(Window{Policy: policy}, 12))
	pairs, skipped = Pairs(b, policy, Goals{})
	if len(pairs) != 11 || skipped != 1 || pairs[0].Window != 3 {
		t.Errorf("one window stolen throughout: %d pairs (first window %d), %d skipped; want 11 from window 3, 1",
			len(pairs), pairs[0].Window, skipped)
	}
}

func TestPairsNeighbours(t *testing.T) {
	fixed := Window{Policy: PolicyFixed, Rate: 50}
	layout := []Window{
		fixed,                            // 0: only the alone after it
		{Policy: PolicyAlone},            // 1
		fixed,                            // 2: both alones
		{Policy: PolicyAlone},            // 3
		{Policy: PolicyAdaptive},         // 4
		fixed,                            // 5: no alone either side
		{Policy: PolicyAdaptive},         // 6
		{Policy: PolicyAlone},            // 7
		{Policy: PolicyFixed, Rate: 100}, // 8: another label
		{Policy: PolicyAlone},            // 9
	}
	// Each alone window's latency is its index in ms-ish units, so the
	// alone side's p99 shows which windows it read.
	sp := synth{seed: 5, winSec: 4, dropped: 1, perSec: 200,
		mult: func(w int, _ string, _ int) float64 { return float64(w + 1) }}
	b := sp.block(layout)
	pairs, _ := Pairs(b, "fixed-50", Goals{MinPairs: 1})
	var got []int
	for _, p := range pairs {
		got = append(got, p.Window)
	}
	if !reflect.DeepEqual(got, []int{0, 2}) {
		t.Fatalf("fixed-50 pairs at windows %v, want [0 2]", got)
	}
	if pairs[0].AloneSeconds != 3 || pairs[1].AloneSeconds != 6 {
		t.Errorf("alone seconds %d and %d, want 3 (one neighbour) and 6 (two)", pairs[0].AloneSeconds, pairs[1].AloneSeconds)
	}
	// Window 2's alone side holds window 3's (4x) latencies: its p99 is
	// window 3's, over window 1's (2x).
	if r := float64(pairs[1].AloneP99) / float64(pairs[0].AloneP99); r < 1.7 || r > 2.3 {
		t.Errorf("alone p99 %v next to window 2 against %v next to window 0: want twice", pairs[1].AloneP99, pairs[0].AloneP99)
	}
	if ps, _ := Pairs(b, PolicyAlone, Goals{}); ps != nil {
		t.Errorf("alone against itself: %d pairs", len(ps))
	}
	if ps, _ := Pairs(b, "fixed-100", Goals{}); len(ps) != 1 || ps[0].Window != 8 {
		t.Errorf("fixed-100: %+v", ps)
	}
}

func TestVerdictTooFewPairsIsUndecided(t *testing.T) {
	sp := synth{seed: 6, winSec: 6, dropped: 1, perSec: 300, mult: slower(PolicyUnthrottled, 2)}
	b := sp.block(interleaved(Window{Policy: PolicyUnthrottled}, 4))
	pairs, _ := Pairs(b, PolicyUnthrottled, Goals{})
	for name, v := range map[string]Verdict{"median": Decide(pairs, PairRatio, 1.10, Goals{}), "pooled": DecidePooled(pairs, PooledP99Ratio, 1.10, Goals{})} {
		if v.Outcome != OutcomeUndecided || !strings.Contains(v.Reason, "too few pairs") || v.Pairs != 4 {
			t.Errorf("%s, 4 pairs: %v, want undecided for too few pairs", name, v)
		}
		if !strings.Contains(v.String(), "too few pairs: 4 of the 5 needed") {
			t.Errorf("%s: String %q does not say why", name, v)
		}
		if v.Low <= 1.10 {
			t.Errorf("%s: the interval %v is still computed and should read 2x", name, v)
		}
	}

	aa := sp.block(interleaved(Window{Policy: PolicyAA}, 4))
	_, err := CheckAA(aa, Goals{})
	if err == nil || !strings.Contains(err.Error(), "too few pairs") || !strings.Contains(err.Error(), "widen the sample, not the goal") {
		t.Errorf("a/a over 4 pairs: %v", err)
	}
}

func TestAACheckSaysAWideIntervalNeedsAWiderSample(t *testing.T) {
	// Each window's latency drifts by its own factor (sigma 0.4): the a/a
	// windows are still the foreground alone, but 12 pairs cannot pin
	// the median within 20 %.
	drift := rand.New(rand.NewPCG(8, 8))
	factors := make([]float64, 25)
	for i := range factors {
		factors[i] = math.Exp(0.4 * drift.NormFloat64())
	}
	sp := synth{seed: 7, winSec: 6, dropped: 1, perSec: 300,
		mult: func(w int, _ string, _ int) float64 { return factors[w] }}
	b := sp.block(interleaved(Window{Policy: PolicyAA}, 12))
	v, err := CheckAA(b, Goals{})
	if err == nil {
		t.Fatalf("a/a with drifting windows passed: %v", v)
	}
	if !strings.Contains(err.Error(), "interval too wide") || !strings.Contains(err.Error(), "widen the sample, not the goal") {
		t.Errorf("error %q does not say the interval is too wide", err)
	}
	if v.High-v.Low < 0.20 {
		t.Errorf("interval %v is narrower than 0.20", v)
	}
}

func TestAACheckCatchesABias(t *testing.T) {
	sp := synth{seed: 9, winSec: 6, dropped: 1, perSec: 300, mult: slower(PolicyAA, 1.3)}
	b := sp.block(interleaved(Window{Policy: PolicyAA}, 12))
	_, err := CheckAA(b, Goals{})
	if err == nil || !strings.Contains(err.Error(), "not met") {
		t.Errorf("a/a windows 1.3x slower: %v", err)
	}
	sp.mult = slower(PolicyAA, 0.7)
	_, err = CheckAA(sp.block(interleaved(Window{Policy: PolicyAA}, 12)), Goals{})
	if err == nil || !strings.Contains(err.Error(), "not around 1.0") {
		t.Errorf("a/a windows 0.7x: %v", err)
	}
}

func TestFitIsotonicPoolsViolators(t *testing.T) {
	got := FitIsotonic([]float64{1, 2, 3, 4, 5, 6}, []float64{1, 3, 2, 4, 3, 5})
	want := []float64{1, 2.5, 2.5, 3.5, 3.5, 5}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fit %v, want %v", got, want)
	}
	// Out of order, with a tie at x=2 fitted to one value: 5 at x=1
	// pools with 2 and 4 at x=2 into 11/3; 6 at x=3 stays.
	got = FitIsotonic([]float64{3, 1, 2, 2}, []float64{6, 5, 2, 4})
	want = []float64{6, 11.0 / 3, 11.0 / 3, 11.0 / 3}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("fit %v, want %v", got, want)
		}
	}
	// On any data: non-decreasing, and the sum kept.
	rng := rand.New(rand.NewPCG(10, 10))
	x, y := make([]float64, 50), make([]float64, 50)
	sum := 0.0
	for i := range x {
		x[i], y[i] = float64(i), float64(i)/10+rng.NormFloat64()
		sum += y[i]
	}
	fit := FitIsotonic(x, y)
	fsum := 0.0
	for i := range fit {
		fsum += fit[i]
		if i > 0 && fit[i] < fit[i-1] {
			t.Fatalf("fit decreases at %d: %v", i, fit)
		}
	}
	if math.Abs(fsum-sum) > 1e-9 {
		t.Errorf("fit sums to %v, data to %v", fsum, sum)
	}
}

func TestOracleReadsTheCrossing(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	// Crossing 1.10 halfway from rate 20 (1.05) to 30 (1.15).
	pts := []RatePoint{{40, 1.30, 400}, {10, 1.00, 100}, {30, 1.15, 300}, {20, 1.05, 200}}
	rows, rate, ok := Oracle(pts, 1.10)
	if !ok || !near(rate, 25) || !near(rows, 250) {
		t.Errorf("oracle %v rows at rate %v (%v), want 250 at 25", rows, rate, ok)
	}
	// A violator: 1.08 at 20 and 1.02 at 30 pool to 1.05 each, so the
	// crossing moves to a third of the way from 30 (1.05) to 40 (1.20);
	// rows 380 at 30 and 320 at 40 pool to 350.
	pts = []RatePoint{{10, 1.00, 100}, {20, 1.08, 200}, {30, 1.02, 380}, {40, 1.20, 320}}
	rows, rate, ok = Oracle(pts, 1.10)
	if !ok || !near(rate, 30+10.0/3) || !near(rows, 350) {
		t.Errorf("oracle %v rows at rate %v, want 350 at 33.33", rows, rate)
	}
	// Even the slowest rate is over: the crossing is between rate 0
	// (ratio 1.0, no rows) and it.
	rows, rate, ok = Oracle([]RatePoint{{10, 1.30, 90}, {20, 1.50, 150}}, 1.10)
	if !ok || !near(rate, 10.0/3) || !near(rows, 30) {
		t.Errorf("oracle %v rows at rate %v, want 30 at 3.33", rows, rate)
	}
	// Every rate within the goal: the fastest measured.
	rows, rate, ok = Oracle([]RatePoint{{10, 1.00, 90}, {20, 1.04, 150}}, 1.10)
	if !ok || rate != 20 || rows != 150 {
		t.Errorf("oracle %v rows at rate %v, want 150 at 20", rows, rate)
	}
	if _, _, ok := Oracle(nil, 1.10); ok {
		t.Error("an oracle from no points")
	}
	if _, _, ok := Oracle([]RatePoint{{10, math.NaN(), 5}}, 1.10); ok {
		t.Error("an oracle from a point without a ratio")
	}
}

func TestDecideIsDeterministicForASeed(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	var pairs []Pair
	for range 15 {
		pairs = append(pairs, Pair{Ratio: 1.05 + 0.1*rng.NormFloat64()})
	}
	g := Goals{Seed: 42}
	a := Decide(pairs, PairRatio, 1.10, g)
	b := Decide(pairs, PairRatio, 1.10, g)
	if a != b {
		t.Errorf("the same seed decided %v and %v", a, b)
	}
	if !(a.Low <= a.Median && a.Median <= a.High) || a.Pairs != 15 {
		t.Errorf("verdict %v", a)
	}
	// The pairs are not reordered by deciding.
	if pairs[0].Ratio == pairs[1].Ratio {
		t.Fatal("synthetic ratios equal")
	}
	again := Decide(pairs, PairRatio, 1.10, g)
	if again != a {
		t.Errorf("deciding twice: %v then %v", a, again)
	}
}

func TestDecideSignTestAndNaNs(t *testing.T) {
	mk := func(xs ...float64) []Pair {
		var ps []Pair
		for _, x := range xs {
			ps = append(ps, Pair{Ratio: x})
		}
		return ps
	}
	cases := []struct {
		xs   []Pair
		want float64
	}{
		{mk(2, 2, 2, 2, 2, 2, 2, 2, 2, 2), 2.0 / 1024},
		{mk(0, 0, 2, 2, 2, 2, 2, 2, 2, 2), 112.0 / 1024},
		{mk(0, 0, 0, 0, 0, 2, 2, 2, 2, 2), 1},
		{mk(1, 1, 1), 1}, // every value at the goal
	}
	for _, c := range cases {
		if v := Decide(c.xs, PairRatio, 1, Goals{}); math.Abs(v.SignP-c.want) > 1e-12 {
			t.Errorf("sign test of %v: p %v, want %v", v, v.SignP, c.want)
		}
	}
	v := Decide(mk(math.NaN(), 1, math.Inf(1)), PairRatio, 1.1, Goals{MinPairs: 1})
	if v.Pairs != 1 || v.Outcome != OutcomeMet {
		t.Errorf("NaN and infinite values not left out: %v", v)
	}
	v = Decide(nil, PairRatio, 1.1, Goals{})
	if v.String() != "undecided: no pairs (too few pairs: 0 of the 5 needed)" {
		t.Errorf("no pairs: %q", v)
	}
}

func TestVerdictString(t *testing.T) {
	v := Verdict{Outcome: OutcomeMet, Median: 1.04, Low: 0.98, High: 1.09, Pairs: 12}
	if s := v.String(); s != "met: 1.04 [0.98, 1.09], 12 pairs" {
		t.Errorf("String %q", s)
	}
}

func TestCriticalScalesAloneToThePolicySeconds(t *testing.T) {
	// alone, adaptive, alone, adaptive, alone, unthrottled, alone: 5 s
	// windows, 1 dropped. Adaptive seconds are half critical; alone
	// seconds a tenth, except the alone window after the unthrottled one,
	// which no adaptive window neighbours.
	layout := []Window{{Policy: PolicyAlone}, {Policy: PolicyAdaptive}, {Policy: PolicyAlone}, {Policy: PolicyAdaptive},
		{Policy: PolicyAlone}, {Policy: PolicyUnthrottled}, {Policy: PolicyAlone}}
	sp := synth{seed: 12, winSec: 5, dropped: 1, perSec: 10,
		crit: func(w int, p string, _ int) float64 {
			switch {
			case w == 6:
				return 1
			case p == PolicyAdaptive:
				return 0.5
			case p == PolicyAlone:
				return 0.1
			}
			return 0
		},
		// Steal does not leave a second out of the sampler's count.
		steal: func(int, string, int) float64 { return 0.9 },
	}
	b := sp.block(layout)
	pol, alone := Critical(b, PolicyAdaptive, Goals{})
	// Policy: 2 windows x 4 s x 0.5 = 4. Alone: windows 0, 2, 4 (once
	// each) = 12 s x 0.1 = 1.2, scaled to 8 s = 0.8.
	if math.Abs(pol-4) > 1e-9 || math.Abs(alone-0.8) > 1e-9 {
		t.Errorf("critical seconds %v and %v, want 4 and 0.8", pol, alone)
	}
	pairs, _ := Pairs(b, PolicyAdaptive, Goals{MaxSteal: -1, MinPairs: 1})
	if len(pairs) != 2 || math.Abs(pairs[0].Critical-2) > 1e-9 || math.Abs(pairs[0].AloneCritical-0.8) > 1e-9 || pairs[0].AloneSpan != 8 {
		t.Errorf("pairs %+v", pairs)
	}
}

// A verdict must clear the instrument's own noise in its block: in
// cpu-hog a policy paused in every window read 1.91 [1.17, 3.57] beside an
// a/a of 1.06 [0.94, 1.44]; divided by the a/a's high end its low end is
// under the goal, so it is undecided, not "not met". Unthrottled's 2.29
// [1.99, 2.46] beside a/a's [0.97, 1.13] stays not met, and a met verdict
// stays met only where its high end clears the a/a's low end.
func TestGuardWidensByTheAAExcursion(t *testing.T) {
	g := Goals{}
	g.fill()
	v := func(med, lo, hi float64) Verdict {
		return Verdict{Median: med, Low: lo, High: hi, Pairs: 10, Goal: g.P99Ratio}
	}
	paused := Guard(Verdict{Outcome: OutcomeNotMet, Median: 1.91, Low: 1.17, High: 3.57, Pairs: 10, Goal: 1.10}, v(1.06, 0.94, 1.44), g)
	if paused.Outcome != OutcomeUndecided || paused.OwnLow != 1.17 || math.Abs(paused.Low-1.17/1.44) > 1e-9 || math.Abs(paused.High-3.57/0.94) > 1e-9 {
		t.Errorf("paused policy: %+v; want undecided over [%.3f, %.3f], its own interval kept", paused, 1.17/1.44, 3.57/0.94)
	}
	if paused.Reason == "" {
		t.Error("a verdict the guard undid says nothing of why")
	}
	hurt := Guard(v(2.29, 1.99, 2.46), v(1.00, 0.97, 1.13), g)
	if hurt.Outcome != OutcomeNotMet {
		t.Errorf("unthrottled: %+v; want not met", hurt)
	}
	gentle := Guard(v(1.00, 0.95, 1.05), v(1.00, 0.97, 1.02), g)
	if gentle.Outcome != OutcomeMet || math.Abs(gentle.High-1.05/0.97) > 1e-9 {
		t.Errorf("gentle: %+v; want met at %.3f", gentle, 1.05/0.97)
	}
	edge := Guard(v(1.00, 0.95, 1.08), v(1.00, 0.90, 1.02), g)
	if edge.Outcome != OutcomeUndecided {
		t.Errorf("met by its own interval, but 1.08/0.90 is over the goal: %+v; want undecided", edge)
	}
	// An a/a inside [1, 1] at both ends, or none at all, changes nothing.
	if got := Guard(v(1.5, 1.3, 1.7), Verdict{}, g); got.Low != 1.3 || got.OwnLow != 0 {
		t.Errorf("no a/a: %+v; want the verdict as it was", got)
	}
	few := Guard(Verdict{Outcome: OutcomeUndecided, Median: 1.5, Low: 1.3, High: 1.7, Pairs: 4, Goal: 1.10}, v(1.0, 0.98, 1.02), g)
	if few.Outcome != OutcomeUndecided {
		t.Errorf("four pairs: %+v; want undecided whatever the interval", few)
	}
}
