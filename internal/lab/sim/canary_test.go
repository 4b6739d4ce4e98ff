package sim

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPlantFitCanary: the embedded canary models are curves from 1 at
// x = 0 that never fall, one for each probed replay scenario, and each
// one's reading at the p99 goal is its curve at the crossing its p99
// constants give.
func TestPlantFitCanary(t *testing.T) {
	f, err := ParseLatencyFit(plantFitJSON)
	if err != nil {
		t.Fatal(err)
	}
	if f.CanaryForm != CanaryForm {
		t.Errorf("plantfit.json's canary form %q; want %q", f.CanaryForm, CanaryForm)
	}
	for _, name := range probed {
		if _, ok := f.CanaryModel(name); !ok {
			t.Errorf("no canary model for %s", name)
		}
	}
	for _, m := range f.Canary {
		if r := m.Ratio(0); r != 1 {
			t.Errorf("%s: canary(0) = %v; want 1", m.Scenario, r)
		}
		if m.Points == 0 || m.UnthrottledRowsPerSec <= 0 || m.C <= 0 {
			t.Errorf("%s: fitted to %d points, unthrottled at %v rows/s, c = %v", m.Scenario, m.Points, m.UnthrottledRowsPerSec, m.C)
		}
		prev := 1.0
		for x := 0.0; x <= 2; x += 0.001 {
			r := m.Ratio(x)
			if r < prev || math.IsNaN(r) {
				t.Fatalf("%s: canary(%.3f) = %v, under canary just before it, %v", m.Scenario, x, r, prev)
			}
			prev = r
		}
		if m.GoalX > 0 {
			p99 := LatencyModel{A: m.P99A, B: m.P99B}
			if r := p99.Ratio(m.GoalX); math.Abs(r-P99Goal) > 0.002 {
				t.Errorf("%s: the p99 fit reads %.4f at p99_goal_x %v; want 1.10", m.Scenario, r, m.GoalX)
			}
			if math.Abs(m.Ratio(m.GoalX)-m.AtGoal) > 1e-3 {
				t.Errorf("%s: canary_at_p99_goal %v; the curve there reads %v", m.Scenario, m.AtGoal, m.Ratio(m.GoalX))
			}
		}
	}
	// The scenarios whose counterpart was probed read its model; the
	// others surge's.
	for _, sc := range Scenarios() {
		want := sc.Counterpart
		if !slices.Contains(probed, want) {
			want = defaultCounterpart
		}
		if got := sc.CanaryModel().Scenario; got != want {
			t.Errorf("%s (counterpart %s) reads %s's canary; want %s's", sc.Name, sc.Counterpart, got, want)
		}
	}
}

func TestParseLatencyFitRefusesBadCanaryModels(t *testing.T) {
	surge := `{"scenario":"surge","points":5,"unthrottled_rows_per_s":1000,"a":1,"b":0.5,"residual_sd":0.1}`
	canary := `{"scenario":"surge","points":5,"unthrottled_rows_per_s":1000,"c":0.2,"d":0.9,"residual_sd":0.1}`
	doc := func(c ...string) string { return `{"models":[` + surge + `],"canary":[` + strings.Join(c, ",") + `]}` }
	for _, c := range []struct{ json, want string }{
		{doc(canary), ""},
		{doc(strings.Replace(canary, `"c":0.2`, `"c":-0.2`, 1)), "c = -0.2"},
		{doc(strings.Replace(canary, `"d":0.9`, `"d":0`, 1)), "d = 0"},
		{doc(strings.Replace(canary, `"residual_sd":0.1`, `"residual_sd":-1`, 1)), "residual_sd"},
		{doc(strings.Replace(canary, `1000`, `0`, 1)), "unthrottled_rows_per_s"},
		{doc(canary, canary), "canary surge fitted twice"},
		{doc(strings.Replace(canary, "surge", "quiet", 1)), "no canary model for surge"},
		{doc(), "no canary model for surge"},
	} {
		_, err := ParseLatencyFit([]byte(c.json))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v; want %q", c.json, err, c.want)
		}
	}
}

// TestCanaryDeterministic: the same seed gives the same canary every
// second, another seed another; its noise is the fitted spread around
// the model at the tick's rows; and a tick with no work reads 1.
func TestCanaryDeterministic(t *testing.T) {
	sc, _ := ScenarioNamed("steady")
	runAt := func(rate float64, seed uint64, o Options) Result {
		t.Helper()
		r, err := run(sc, "fixed", rate, seed, o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	same := func(a, b Result) bool {
		return slices.EqualFunc(a.Series, b.Series, func(p, q Point) bool { return p.Canary == q.Canary })
	}
	a, b, c := runAt(50, 1, Options{}), runAt(50, 1, Options{}), runAt(50, 2, Options{})
	if !same(a, b) || a.CanaryRatioMedian != b.CanaryRatioMedian {
		t.Fatal("the same seed gave other canary readings")
	}
	if same(a, c) {
		t.Fatal("another seed gave the same canary readings: its noise is not seeded")
	}
	m := sc.CanaryModel()
	if a.CanaryCounterpart != m.Scenario || m.Scenario != "surge" {
		t.Errorf("steady reads %q's canary, the result says %q; want surge", m.Scenario, a.CanaryCounterpart)
	}
	var mean, sq float64
	for _, p := range a.Series {
		l := math.Log(p.Canary / m.Ratio(p.Done*rowsPerBatch/jobCeilingRows))
		mean, sq = mean+l, sq+l*l
	}
	n := float64(len(a.Series))
	mean /= n
	if sd := math.Sqrt(sq/n - mean*mean); math.Abs(mean) > 0.03 || math.Abs(sd-m.ResidualSD) > 0.2*m.ResidualSD {
		t.Errorf("ln(canary / model) has mean %.3f and sd %.3f; want about 0 and the fitted %.3f", mean, sd, m.ResidualSD)
	}
	// No job: every probe is job-free, the ratio 1 exactly.
	for _, p := range runAt(0, 1, Options{}).Series {
		if p.Canary != 1 {
			t.Fatalf("no job, and the canary reads %v at %v s", p.Canary, p.T)
		}
	}
	// Without noise the canary is the model's curve.
	for _, p := range runAt(50, 1, Options{CanaryNoise: -1}).Series {
		if want := m.Ratio(p.Done * rowsPerBatch / jobCeilingRows); p.Canary != want {
			t.Fatalf("no noise: canary %v at %v s; want the model's %v", p.Canary, p.T, want)
		}
	}
}

// TestCanaryFollowsTheRows: unthrottled (fixed at the jobs' ceiling)
// reads a higher canary than the best fixed rate, on every seed, in
// every scenario with a probed counterpart.
func TestCanaryFollowsTheRows(t *testing.T) {
	for _, name := range []string{"steady", "cores-halved", "slow-archiver"} {
		sc, _ := ScenarioNamed(name)
		for seed := uint64(1); seed <= 3; seed++ {
			unthrottled, err := run(sc, "fixed", maxBudget, seed, Options{})
			if err != nil {
				t.Fatal(err)
			}
			fixed, err := Run(sc, "fixed", seed)
			if err != nil {
				t.Fatal(err)
			}
			if !(unthrottled.CanaryRatioMedian > fixed.CanaryRatioMedian) || !(fixed.CanaryRatioMedian >= 1) {
				t.Errorf("%s seed %d: canary unthrottled %.3f, fixed at %.0f/s %.3f; want unthrottled higher, fixed 1 or more",
					name, seed, unthrottled.CanaryRatioMedian, fixed.FixedRate, fixed.CanaryRatioMedian)
			}
			if want := sc.CanaryModel().Ratio(1); math.Abs(math.Log(unthrottled.CanaryRatioMedian/want)) > 0.05 {
				t.Errorf("%s seed %d: unthrottled canary %.3f; want the model's %.3f at x = 1", name, seed, unthrottled.CanaryRatioMedian, want)
			}
		}
	}
}

// TestCanaryOnlyWhenAsked: the plant's canary changes no column unless
// adaptive runs with its rule; with it, adaptive cuts for it.
func TestCanaryOnlyWhenAsked(t *testing.T) {
	sc, _ := ScenarioNamed("steady")
	plain, err := Run(sc, "adaptive", 1)
	if err != nil {
		t.Fatal(err)
	}
	// The canary's noise is its own stream: none at all changes nothing
	// the controller reads without the rule.
	quiet, err := RunWith(sc, "adaptive", 1, Options{CanaryNoise: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(plain.Series, quiet.Series, func(p, q Point) bool {
		return p.Rate == q.Rate && p.Load == q.Load && p.P99Ratio == q.P99Ratio && p.Mode == q.Mode
	}) || plain.Work != quiet.Work {
		t.Error("the canary's noise moved adaptive without its rule")
	}
	ruled, err := RunWith(sc, "adaptive", 1, Options{CanaryTarget: 1.05})
	if err != nil {
		t.Fatal(err)
	}
	if ruled.CanaryTarget != 1.05 || plain.CanaryTarget != 0 {
		t.Errorf("canary targets %v with the rule, %v without", ruled.CanaryTarget, plain.CanaryTarget)
	}
	if !(ruled.Work < 0.5*plain.Work) || !(ruled.P99RatioMedian < plain.P99RatioMedian) {
		t.Errorf("steady: the canary's rule at 1.05 did %.0f batches (p99 %.2f), without it %.0f (p99 %.2f); want far fewer, a lower p99",
			ruled.Work, ruled.P99RatioMedian, plain.Work, plain.P99RatioMedian)
	}
	// The other policies ignore the options.
	f1, _ := Run(sc, "aimd", 1)
	f2, _ := RunWith(sc, "aimd", 1, Options{CanaryTarget: 1.05, MaxGrowth: 2})
	if f1.Work != f2.Work || f2.CanaryTarget != 0 {
		t.Errorf("aimd with adaptive's options: work %v and %v", f1.Work, f2.Work)
	}
}

func TestOptionsRefused(t *testing.T) {
	sc, _ := ScenarioNamed("steady")
	for _, o := range []Options{{CanaryTarget: 1}, {CanaryTarget: 0.9}, {MaxGrowth: 1}, {GrowEvery: -1}, {BreachMemory: -time.Second}} {
		if _, err := RunWith(sc, "adaptive", 1, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
