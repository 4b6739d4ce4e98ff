package sim

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestPlantFit: the embedded plantfit.json parses, and every model is a
// curve from 1 at x = 0 that never falls; every scenario's counterpart
// has a model of its own (none falls back to surge unsaid).
func TestPlantFit(t *testing.T) {
	f, err := ParseLatencyFit(plantFitJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Models) < 2 || f.Form != LatencyForm {
		t.Fatalf("plantfit.json: %d models, form %q", len(f.Models), f.Form)
	}
	for _, m := range f.Models {
		if r := m.Ratio(0); r != 1 {
			t.Errorf("%s: ratio(0) = %v; want 1", m.Scenario, r)
		}
		if m.Points == 0 || m.UnthrottledRowsPerSec <= 0 {
			t.Errorf("%s: fitted to %d points, unthrottled at %v rows/s", m.Scenario, m.Points, m.UnthrottledRowsPerSec)
		}
		prev := 1.0
		for x := 0.0; x <= 2; x += 0.001 {
			r := m.Ratio(x)
			if r < prev || math.IsNaN(r) {
				t.Fatalf("%s: ratio(%.3f) = %v, under ratio just before it, %v", m.Scenario, x, r, prev)
			}
			prev = r
		}
	}
	for _, sc := range Scenarios() {
		if _, ok := f.Model(sc.Counterpart); !ok {
			t.Errorf("%s: counterpart %q has no model in plantfit.json", sc.Name, sc.Counterpart)
		}
	}
}

func TestParseLatencyFitRefusesBadModels(t *testing.T) {
	surge := `{"scenario":"surge","points":5,"unthrottled_rows_per_s":1000,"a":1,"b":0.5,"residual_sd":0.1}`
	for _, c := range []struct{ json, want string }{
		{`{"models":[` + surge + `]}`, ""},
		{`{"models":[` + strings.Replace(surge, `"a":1`, `"a":-1`, 1) + `]}`, "a = -1"},
		{`{"models":[` + strings.Replace(surge, `"b":0.5`, `"b":0`, 1) + `]}`, "b = 0"},
		{`{"models":[` + strings.Replace(surge, `"residual_sd":0.1`, `"residual_sd":-0.1`, 1) + `]}`, "residual_sd"},
		{`{"models":[` + strings.Replace(surge, `1000`, `0`, 1) + `]}`, "unthrottled_rows_per_s"},
		{`{"models":[` + surge + `,` + surge + `]}`, "fitted twice"},
		{`{"models":[` + strings.Replace(surge, "surge", "cpu-hog", 1) + `]}`, "no model for surge"},
		{`{"models":`, "plantfit.json"},
	} {
		// Every file has a canary model for surge besides.
		doc := c.json
		if strings.HasSuffix(doc, "]}") {
			doc = strings.TrimSuffix(doc, "}") + `,"canary":[{"scenario":"surge","points":5,"unthrottled_rows_per_s":1000,"c":0.2,"d":0.9}]}`
		}
		_, err := ParseLatencyFit([]byte(doc))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v; want %q", doc, err, c.want)
		}
	}
}

// TestP99RatioDeterministic: the same seed gives the same ratios every
// second; another seed other ones; and the ratios are what the model
// says at the jobs' rows, within its noise.
func TestP99RatioDeterministic(t *testing.T) {
	a, b := run1(t, "steady", "adaptive"), run1(t, "steady", "adaptive")
	if a.P99RatioMedian != b.P99RatioMedian || a.P99OverGoalShare != b.P99OverGoalShare {
		t.Fatalf("same seed: median %v and %v, share %v and %v", a.P99RatioMedian, b.P99RatioMedian, a.P99OverGoalShare, b.P99OverGoalShare)
	}
	for i := range a.Series {
		if a.Series[i].P99Ratio != b.Series[i].P99Ratio {
			t.Fatalf("same seed: second %d reads %v and %v", i, a.Series[i].P99Ratio, b.Series[i].P99Ratio)
		}
	}
	sc, _ := ScenarioNamed("steady")
	c, err := Run(sc, "adaptive", 2)
	if err != nil {
		t.Fatal(err)
	}
	if slices.EqualFunc(a.Series, c.Series, func(p, q Point) bool { return p.P99Ratio == q.P99Ratio }) {
		t.Fatal("another seed gave the same p99 ratios: the latency noise is not seeded")
	}
	m := sc.LatencyModel()
	if a.Counterpart != m.Scenario || m.Scenario != "surge" {
		t.Errorf("steady runs with %q's model, the result says %q; want surge", m.Scenario, a.Counterpart)
	}
	// Each second's ratio over the model's median at its rows is the
	// noise: its spread is the fitted one.
	var logs []float64
	for _, p := range a.Series {
		logs = append(logs, math.Log(p.P99Ratio/m.Ratio(p.Done*rowsPerBatch/jobCeilingRows)))
	}
	var mean, sq float64
	for _, l := range logs {
		mean += l
		sq += l * l
	}
	mean /= float64(len(logs))
	sd := math.Sqrt(sq/float64(len(logs)) - mean*mean)
	if math.Abs(mean) > 0.03 || math.Abs(sd-m.ResidualSD) > 0.2*m.ResidualSD {
		t.Errorf("ln(ratio / model) has mean %.3f and sd %.3f; want about 0 and the fitted %.3f", mean, sd, m.ResidualSD)
	}
}

// TestP99RatioFollowsTheRows: an unthrottled job (fixed at the jobs'
// ceiling) costs the users more than the best fixed rate, and no job
// costs nothing but the noise.
func TestP99RatioFollowsTheRows(t *testing.T) {
	for _, name := range []string{"steady", "primary-saturates-lag-zero"} {
		sc, _ := ScenarioNamed(name)
		m := sc.LatencyModel()
		unthrottled, err := run(sc, "fixed", maxBudget, 1, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fixed := run1(t, name, "fixed")
		none, err := run(sc, "fixed", 0, 1, Options{})
		if err != nil {
			t.Fatal(err)
		}
		// The share of seconds over the goal saturates at 100 %: where the
		// best fixed rate is already there, unthrottled cannot be higher.
		if !(unthrottled.P99RatioMedian > fixed.P99RatioMedian) || !(unthrottled.P99OverGoalShare > fixed.P99OverGoalShare || unthrottled.P99OverGoalShare == 1) {
			t.Errorf("%s: unthrottled p99 ratio %.2f (%.0f %% over 1.10), fixed at %.0f/s %.2f (%.0f %%); want unthrottled higher", name,
				unthrottled.P99RatioMedian, 100*unthrottled.P99OverGoalShare, fixed.FixedRate, fixed.P99RatioMedian, 100*fixed.P99OverGoalShare)
		}
		if want := m.Ratio(1); math.Abs(math.Log(unthrottled.P99RatioMedian/want)) > 0.05 {
			t.Errorf("%s: unthrottled p99 ratio %.3f; want the model's %.3f at x = 1", name, unthrottled.P99RatioMedian, want)
		}
		if math.Abs(math.Log(none.P99RatioMedian)) > 0.05 {
			t.Errorf("%s: no job, p99 ratio %.3f; want about 1", name, none.P99RatioMedian)
		}
		floor := 0.5 * math.Erfc(math.Log(P99Goal)/m.ResidualSD/math.Sqrt2)
		if math.Abs(none.P99OverGoalShare-floor) > 0.06 {
			t.Errorf("%s: no job, %.0f %% of seconds over 1.10; want the noise's %.0f %%", name, 100*none.P99OverGoalShare, 100*floor)
		}
	}
}

func TestP99Summary(t *testing.T) {
	if m, s := p99Summary([]float64{1.3, 1, 1.05, 1.2}); m != 1.125 || s != 0.5 {
		t.Errorf("p99Summary = %v, %v; want 1.125, 0.5", m, s)
	}
	if m, s := p99Summary([]float64{1.1, 0.9, 2}); m != 1.1 || math.Abs(s-1.0/3) > 1e-12 {
		t.Errorf("p99Summary = %v, %v; want 1.1 (1.10 itself is not over), 1/3", m, s)
	}
}

func TestWindowRatioPoolsTheSeconds(t *testing.T) {
	const sd = 0.5
	flat := make([]float64, 20)
	for i := range flat {
		flat[i] = 1.3
	}
	if got := WindowRatio(flat, sd); math.Abs(got-1.3) > 1e-6 {
		t.Errorf("twenty seconds at 1.3: %v; want 1.3", got)
	}
	// One second in twenty at 3 holds 5 % of the window's transactions:
	// more than the 1 % over the p99, so the pooled p99 rises well past
	// the seconds' median (1) and past their mean (1.1).
	spike := make([]float64, 20)
	for i := range spike {
		spike[i] = 1
	}
	spike[0] = 3
	got := WindowRatio(spike, sd)
	if got < 1.3 || got >= 3 {
		t.Errorf("one second at 3 among nineteen at 1: %v; want between 1.3 and 3", got)
	}
	// The narrower the alone latencies, the more the spike's second sets
	// the window's p99.
	if narrow := WindowRatio(spike, 0.1); narrow <= got {
		t.Errorf("sd 0.1: %v; want over sd 0.5's %v", narrow, got)
	}
	if got := WindowRatio(spike, 0); got != 3 {
		t.Errorf("sd 0: %v; want the largest ratio, 3", got)
	}
	if got := WindowRatio(nil, sd); got != 1 {
		t.Errorf("no seconds: %v; want 1", got)
	}
}

func TestWindowMedianReadsTwentySecondWindows(t *testing.T) {
	// Three windows: two flat at 1, one with a spike. The median is a
	// flat one's.
	rs := make([]float64, 3*WindowSeconds+5)
	for i := range rs {
		rs[i] = 1
	}
	rs[WindowSeconds] = 4
	if got := windowP99Median(rs, 0.3); math.Abs(got-1) > 1e-6 {
		t.Errorf("median of windows: %v; want 1", got)
	}
	rs[0], rs[2*WindowSeconds] = 4, 4
	if got := windowP99Median(rs, 0.3); got <= 1.2 {
		t.Errorf("a spike in every window: %v; want well over 1", got)
	}
}
