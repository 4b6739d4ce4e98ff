package simfit

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/lab/sim"
)

// aloneProbe is the synthetic canary's commit latency alone.
const aloneProbe = 2 * time.Millisecond

// probeWindow is one policy window of a synthetic probe block: its
// label's parts, rows per second, the foreground's p99 ratio and the
// canary's ratio (every probe of a second at it).
type probeWindow struct {
	policy       string
	rate, rows   float64
	p99, canary  float64
	spreadProbes bool // half the probes at 0.5x, half at 1.5x the ratio's latency: mean as before, p90 higher
}

// probes is a second's canary: 20 commits at lat, or spread around it.
func probes(lat time.Duration, spread bool) *replay.SparseHist {
	h := replay.NewHistogram()
	for i := range 20 {
		d := lat
		if spread {
			d = time.Duration(float64(lat) * (0.5 + float64(i%2)))
		}
		h.Record(d)
	}
	s := replay.Sparse(h)
	return &s
}

// probeBlock lays each window between two alone ones of 2 s, the alone
// ones dropping their first second as the replay's do; that dropped
// second's probes are a thousand times slower, so a fit that read them
// would be far off.
func probeBlock(name string, ws []probeWindow) *replay.Block {
	b := &replay.Block{Scenario: name, WindowSeconds: 2}
	add := func(policy string, rate float64, lat, probe time.Duration, spread bool, rows int64, dropped int) {
		start := len(b.Seconds)
		for i := range 2 {
			s := second(start+i, lat, rows, 0)
			p := probe
			if i < dropped {
				p *= 1000
			}
			s.Probe = probes(p, spread)
			b.Seconds = append(b.Seconds, s)
		}
		b.Windows = append(b.Windows, replay.Window{Policy: policy, Rate: rate, Start: start, End: start + 2, Dropped: dropped})
	}
	alone := func() { add(replay.PolicyAlone, 0, aloneLatency, aloneProbe, false, 0, 1) }
	alone()
	for _, w := range ws {
		add(w.policy, w.rate, time.Duration(float64(aloneLatency)*w.p99), time.Duration(float64(aloneProbe)*w.canary), w.spreadProbes, int64(w.rows), 0)
		alone()
	}
	return b
}

// knownProbeBlock follows canary(x) = 1 + c·x^d and p99(x) = 1 + a·x^b
// (x over 100,000 rows/s) with log-normal noise of sd on the canary.
func knownProbeBlock(c, d, a, b, sd float64, seed uint64) (*replay.Block, []probeWindow) {
	rng := rand.New(rand.NewPCG(seed, 2))
	var ws []probeWindow
	add := func(policy string, rate, rows float64) {
		x := rows / 1e5
		ws = append(ws, probeWindow{policy: policy, rate: rate, rows: rows, p99: 1 + a*math.Pow(x, b),
			canary: (1 + c*math.Pow(x, d)) * math.Exp(sd*rng.NormFloat64())})
	}
	for range 10 {
		add(replay.PolicyAA, 0, 0)
		add(replay.PolicyUnthrottled, 0, 1e5)
	}
	for i, rows := range []float64{2000, 5000, 10000, 20000, 40000, 70000} {
		for range 6 {
			add(replay.PolicyFixed, float64(i+1), rows)
		}
	}
	return probeBlock("surge", ws), ws
}

// TestCanaryFitRecoversKnownConstants: probe blocks built from known
// curves, with noise, give those curves back, and the canary's reading
// at the p99 goal is the known curve's at the known crossing.
func TestCanaryFitRecoversKnownConstants(t *testing.T) {
	for _, k := range []struct{ c, d, a, b, sd float64 }{
		{0.2, 0.9, 1.8, 0.75, 0.05},
		{1.0, 1.6, 1.1, 1.5, 0.08},
		{0.45, 0.7, 1.9, 0.8, 0.03},
	} {
		blk, ws := knownProbeBlock(k.c, k.d, k.a, k.b, k.sd, 11)
		s := FitCanaryBlock(blk)
		m := s.Model
		if !s.Fitted || m.Points != len(ws) || m.UnthrottledRowsPerSec != 1e5 || len(s.Points) != len(ws) {
			t.Fatalf("%+v: fitted %v (%s), %d points of %d, unthrottled at %v rows/s", k, s.Fitted, s.Reason, m.Points, len(ws), m.UnthrottledRowsPerSec)
		}
		for _, x := range []float64{0.05, 0.2, 0.5, 1} {
			want := 1 + k.c*math.Pow(x, k.d)
			if got := m.Ratio(x); math.Abs(math.Log(got/want)) > k.sd {
				t.Errorf("%+v: canary(%v) = %.3f; want %.3f (c=%.3f d=%.3f)", k, x, got, want, m.C, m.D)
			}
		}
		if m.ResidualSD < 0.6*k.sd || m.ResidualSD > 1.5*k.sd {
			t.Errorf("%+v: residual sd %.4f; want about %v", k, m.ResidualSD, k.sd)
		}
		// The p99 ratio has no noise here: its crossing is the curve's.
		wantX := math.Pow(0.1/k.a, 1/k.b)
		if math.Abs(m.GoalX-wantX) > 0.02*wantX+1e-4 {
			t.Errorf("%+v: p99 reaches 1.10 at x = %.4f; want %.4f (a=%.3f b=%.3f)", k, m.GoalX, wantX, m.P99A, m.P99B)
		}
		// The canary there, within the noise as the curve is.
		if want := 1 + k.c*math.Pow(wantX, k.d); math.Abs(math.Log(m.AtGoal/want)) > k.sd {
			t.Errorf("%+v: canary at the p99 goal %.4f; want %.4f", k, m.AtGoal, want)
		}
		if got := m.Ratio(m.GoalX); math.Abs(m.AtGoal-got) > 1e-4 {
			t.Errorf("%+v: canary at the p99 goal %.4f, the curve at its x %.4f", k, m.AtGoal, got)
		}
		// The checks: every policy, with its medians.
		if len(s.Checks) != 8 || s.Checks[1].Policy != replay.PolicyUnthrottled || s.Checks[1].RowsPerSec != 1e5 {
			t.Fatalf("%+v: checks %+v", k, s.Checks)
		}
		if !math.IsNaN(s.Checks[1].OwnRaw) {
			t.Errorf("unthrottled has adaptive's own canary: %v", s.Checks[1].OwnRaw)
		}
	}
}

// TestCanaryPointsReadTheKeptProbes: a pair's ratios are its probes'
// mean and p90 over those of its alone neighbours' kept seconds, not the
// dropped ones (a thousand times slower in probeBlock).
func TestCanaryPointsReadTheKeptProbes(t *testing.T) {
	blk := probeBlock("surge", []probeWindow{
		{policy: replay.PolicyUnthrottled, rows: 1e5, p99: 2, canary: 1.3},
		{policy: replay.PolicyFixed, rate: 1, rows: 2e4, p99: 1.2, canary: 1.1, spreadProbes: true},
	})
	pts, x0 := CanaryPoints(blk)
	if len(pts) != 2 || x0 != 1e5 {
		t.Fatalf("points %+v, x0 %v", pts, x0)
	}
	// Histogram buckets are 2 % wide: a ratio of two is within that.
	near := func(got, want float64) bool { return math.Abs(got/want-1) < 0.025 }
	u, f := pts[0], pts[1]
	if u.Policy != replay.PolicyUnthrottled || u.X != 1 || !near(u.Mean, 1.3) || !near(u.P90, 1.3) || !near(u.P99Ratio, 2) {
		t.Errorf("unthrottled: %+v", u)
	}
	if u.Probes != 40 || u.AloneProbes != 40 {
		t.Errorf("unthrottled read %d probes and %d alone; want 40 each (the alone windows' dropped seconds left out)", u.Probes, u.AloneProbes)
	}
	// Spread 0.5x and 1.5x: the mean is the ratio's, the p90 1.5 times it.
	if f.X != 0.2 || !near(f.Mean, 1.1) || !near(f.P90, 1.65) {
		t.Errorf("fixed: %+v; want mean 1.1 and p90 1.65", f)
	}
}

// TestCanaryNotFitted: a block run without the instrument's canary gives
// no model, and says why; FitAll keeps the p99 models regardless.
func TestCanaryNotFitted(t *testing.T) {
	blk, _ := knownBlock(1.8, 0.75, 0.05, 7)
	s := FitCanaryBlock(blk)
	if s.Fitted || s.Reason == "" || len(s.Points) != 0 {
		t.Errorf("a block without probes: %+v", s)
	}
	f, all, canaries := FitAll([]*replay.Block{blk}, []*replay.Block{blk})
	if len(f.Models) != 1 || len(all) != 1 || len(f.Canary) != 0 || len(canaries) != 1 || f.CanaryForm != sim.CanaryForm {
		t.Errorf("FitAll: %d models, %d canary models, form %q", len(f.Models), len(f.Canary), f.CanaryForm)
	}
}

func TestGoalCrossing(t *testing.T) {
	if x, ok := GoalCrossing(sim.LatencyModel{A: 0.4, B: 2}, 1.1); !ok || math.Abs(x-0.5) > 1e-12 {
		t.Errorf("1 + 0.4x^2 = 1.1 at %v, %v; want 0.5", x, ok)
	}
	if _, ok := GoalCrossing(sim.LatencyModel{A: 0, B: 1}, 1.1); ok {
		t.Error("a flat curve crosses 1.10")
	}
}
