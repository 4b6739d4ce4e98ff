package simfit

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/lab/sim"
)

// aloneLatency is the synthetic foreground's latency alone: every
// transaction of a second takes it, so a side's p99 is exactly it.
const aloneLatency = 10 * time.Millisecond

// second is one second of a synthetic block: perSec transactions all at
// lat, rows cleaned, steal.
func second(t int, lat time.Duration, rows int64, steal float64) replay.Second {
	h := replay.NewHistogram()
	for range 1000 {
		h.Record(lat)
	}
	return replay.Second{T: t, Lat: replay.Sparse(h), Rows: rows, Steal: steal, Load: -1}
}

// window is one policy window of a synthetic block: its label's parts,
// the rows it cleans per second and its p99 ratio.
type window struct {
	policy string
	rate   float64
	rows   float64
	ratio  float64
}

// syntheticBlock lays each window between two alone ones (2 s each), as
// the replay does, with its ratio's latency and its rows in each second.
func syntheticBlock(name string, ws []window) *replay.Block {
	b := &replay.Block{Scenario: name, WindowSeconds: 2}
	add := func(policy string, rate float64, lat time.Duration, rows int64) {
		start := len(b.Seconds)
		for i := range 2 {
			b.Seconds = append(b.Seconds, second(start+i, lat, rows, 0))
		}
		b.Windows = append(b.Windows, replay.Window{Policy: policy, Rate: rate, Start: start, End: start + 2})
	}
	add(replay.PolicyAlone, 0, aloneLatency, 0)
	for _, w := range ws {
		add(w.policy, w.rate, time.Duration(float64(aloneLatency)*w.ratio), int64(w.rows))
		add(replay.PolicyAlone, 0, aloneLatency, 0)
	}
	return b
}

// knownBlock is a block whose ratios follow 1 + a·x^b (x over 100,000
// rows/s, unthrottled's) times log-normal noise of sd, with a few
// stalls: windows whose ratio is five times, or a fifth of, the curve's.
func knownBlock(a, b, sd float64, seed uint64) (*replay.Block, []window) {
	rng := rand.New(rand.NewPCG(seed, 1))
	curve := func(rows float64) float64 { return 1 + a*math.Pow(rows/1e5, b) }
	var ws []window
	noisy := func(policy string, rate, rows float64) {
		ws = append(ws, window{policy, rate, rows, curve(rows) * math.Exp(sd*rng.NormFloat64())})
	}
	for range 10 {
		noisy(replay.PolicyAA, 0, 0)
		noisy(replay.PolicyUnthrottled, 0, 1e5)
	}
	for i, rows := range []float64{2000, 5000, 10000, 20000, 40000, 70000} {
		for range 6 {
			noisy(replay.PolicyFixed, float64(i+1), rows)
		}
	}
	// Stalls, where they would pull a mean furthest.
	ws = append(ws, window{replay.PolicyFixed, 1, 2000, 5 * curve(2000)}, window{replay.PolicyFixed, 2, 5000, 5 * curve(5000)},
		window{replay.PolicyUnthrottled, 0, 1e5, curve(1e5) / 5})
	return syntheticBlock("surge", ws), ws
}

// TestFitRecoversKnownConstants: blocks built from known curves, with
// noise and stalls, give those curves back.
func TestFitRecoversKnownConstants(t *testing.T) {
	for _, c := range []struct{ a, b, sd float64 }{
		{1.8, 0.75, 0.05},
		{0.4, 1.5, 0.05},
		{0.35, 0.2, 0.03},
		{1.2, 1, 0.10},
	} {
		blk, ws := knownBlock(c.a, c.b, c.sd, 7)
		s := FitBlock(blk)
		m := s.Model
		if !s.Fitted || m.Points != len(ws) || m.UnthrottledRowsPerSec != 1e5 {
			t.Fatalf("a=%v b=%v: fitted %v (%s), %d points of %d, unthrottled at %v rows/s", c.a, c.b, s.Fitted, s.Reason, m.Points, len(ws), m.UnthrottledRowsPerSec)
		}
		tol := 3 * c.sd // on the curve's excess, where it is measured
		if math.Abs(m.A-c.a) > tol*(1+c.a) || math.Abs(m.B-c.b) > 0.25*c.b+0.05 {
			t.Errorf("a=%v b=%v: fitted a=%.3f b=%.3f", c.a, c.b, m.A, m.B)
		}
		for _, x := range []float64{0.02, 0.1, 0.4, 1} {
			want := 1 + c.a*math.Pow(x, c.b)
			if got := m.Ratio(x); math.Abs(math.Log(got/want)) > c.sd {
				t.Errorf("a=%v b=%v: ratio(%v) = %.3f; want %.3f", c.a, c.b, x, got, want)
			}
		}
		if m.ResidualSD < 0.6*c.sd || m.ResidualSD > 1.5*c.sd {
			t.Errorf("a=%v b=%v: residual sd %.4f; want about %v (the stalls left out)", c.a, c.b, m.ResidualSD, c.sd)
		}
		if m.Outliers < 3 {
			t.Errorf("a=%v b=%v: %d outliers; the three stalls are more than three sds out", c.a, c.b, m.Outliers)
		}
		// The checks: unthrottled at x = 1 and each fixed rate.
		if len(s.Checks) != 7 || s.Checks[0].Policy != replay.PolicyUnthrottled || s.Checks[1].Policy != "fixed-1" {
			t.Errorf("checks: %+v", s.Checks)
		}
	}
}

// TestFitFlat: a job that costs nothing fits the flat curve, not a
// rising one read into the noise.
func TestFitFlat(t *testing.T) {
	blk, _ := knownBlock(0, 1, 0.05, 3)
	m := FitBlock(blk).Model
	if r := m.Ratio(1); r > 1.03 {
		t.Errorf("a job costing nothing: fitted a=%.3f b=%.3f, ratio(1) = %.3f", m.A, m.B, r)
	}
	// Falling ratios (the job's windows faster than alone): flat too, as
	// the curve may not fall.
	var ws []window
	for i := range 10 {
		ws = append(ws, window{replay.PolicyUnthrottled, 0, 1e5, 0.8}, window{replay.PolicyFixed, 1, 1e4 * float64(i+1), 0.9})
	}
	if a, b := Fit([]float64{1, 0.5, 0.1}, []float64{0.8, 0.85, 0.9}); a != 0 || b != 1 {
		t.Errorf("falling ratios: a=%v b=%v; want the flat curve, 0 and 1", a, b)
	}
	if m := FitBlock(syntheticBlock("replay-paused", ws)).Model; m.A != 0 {
		t.Errorf("falling ratios: a=%v", m.A)
	}
}

// TestFitMedianNotMean: moving a point further out on the side it is
// already on moves a least-absolute-deviations fit not at all.
func TestFitMedianNotMean(t *testing.T) {
	xs := []float64{0.05, 0.1, 0.2, 0.4, 0.7, 1, 0.05, 0.1, 0.2, 0.4, 0.7, 1, 1}
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = (1 + math.Pow(x, 0.5)) * math.Exp(0.03*math.Sin(float64(i)))
	}
	ys[len(ys)-1] = 1.2 // under the curve
	a1, b1 := Fit(xs, ys)
	ys[len(ys)-1] = 0.2 // far under it
	a2, b2 := Fit(xs, ys)
	if math.Abs(a1-a2) > 1e-3 || math.Abs(b1-b2) > 1e-3 {
		t.Errorf("moving one point further out moved the fit: a %.4f to %.4f, b %.4f to %.4f", a1, a2, b1, b2)
	}
}

func TestFitBlockWithoutForeground(t *testing.T) {
	b := &replay.Block{Scenario: "idle", WindowSeconds: 2}
	for i := range 6 {
		b.Seconds = append(b.Seconds, replay.Second{T: i, Rows: 1000, Steal: 0.2 * float64(i%2), Load: -1})
	}
	b.Windows = []replay.Window{{Policy: replay.PolicyAlone, Start: 0, End: 2}, {Policy: replay.PolicyUnthrottled, Start: 2, End: 4}, {Policy: replay.PolicyAlone, Start: 4, End: 6}}
	f, all := FitBlocks([]*replay.Block{b})
	if len(f.Models) != 0 || len(all) != 1 || all[0].Fitted || all[0].Reason == "" {
		t.Fatalf("a block without foreground: %+v, %+v", f, all)
	}
	if st := all[0].Model.Steal; st.Seconds != 6 || st.OverShare != 0.5 || st.Max != 0.2 || st.P50 != 0 || st.P90 != 0.2 {
		t.Errorf("steal: %+v", st)
	}
}

func TestSteal(t *testing.T) {
	b := &replay.Block{}
	for i := range 100 {
		b.Seconds = append(b.Seconds, replay.Second{T: i, Steal: float64(i) / 100})
	}
	b.Seconds = append(b.Seconds, replay.Second{T: 100, Steal: -1}) // unreadable
	st := Steal(b)
	want := sim.StealStats{Seconds: 100, OverShare: 0.89, P50: 0.49, P90: 0.89, P99: 0.98, Max: 0.99}
	if st != want {
		t.Errorf("Steal = %+v; want %+v", st, want)
	}
}
