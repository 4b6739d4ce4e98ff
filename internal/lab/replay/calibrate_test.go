package replay

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// machine is a foreground whose p99 bends past a knee that may move from
// ramp to ramp (knees[ramp], the last one repeated), with optional stray
// stalls at given offered rates, and whose load rises with the rate.
type machine struct {
	knees      []float64
	loadPer    float64 // mean raw load per tx/s offered
	stalls     map[int]bool
	loadSpikes map[int]bool
	steps      int
	lastRate   float64
	ramp       int
	failAtStep int
}

func (m *machine) measure(r float64) (CalibrationStep, error) {
	m.steps++
	if m.failAtStep > 0 && m.steps == m.failAtStep {
		return CalibrationStep{}, errors.New("the pair went away")
	}
	// A rate lower than the last starts a new ramp.
	if r < m.lastRate {
		m.ramp++
	}
	m.lastRate = r
	knee := m.knees[min(m.ramp, len(m.knees)-1)]
	st := CalibrationStep{Rate: r, TPS: r, Load: r * m.loadPer, P99: time.Millisecond}
	if r > knee || m.stalls[m.steps] {
		st.P99 = 20 * time.Millisecond
	}
	if m.loadSpikes[m.steps] {
		st.Load = 0.75
	}
	return st, nil
}

func quiet(string, ...any) {}

func TestCalibrationMeasuresTheKneeUntilTwoRampsAgree(t *testing.T) {
	m := &machine{knees: []float64{4000}, stalls: map[int]bool{6: true}}
	cal, err := search(0.5, 50, m.measure, quiet)
	if err != nil {
		t.Fatal(err)
	}
	// The fine ramps find the knee within one fine step (10 %), where the
	// coarse ramp alone could only say it was between 2,531 and 3,797.
	if lo, hi := KneeShare*4000/calFineGrowth, KneeShare*4000; cal.Rate < lo || cal.Rate > hi {
		t.Errorf("rate %.0f, want a quarter of the knee, between %.0f and %.0f (%s)", cal.Rate, lo, hi, cal.Why)
	}
	if len(cal.Readings) != 3 {
		t.Errorf("readings %v, want the first two fine ramps to agree", cal.Readings)
	}
	if !strings.Contains(cal.Why, "fine ramps 1 and 2 agreed") {
		t.Errorf("why %q does not say which ramps agreed", cal.Why)
	}
	// The stray stall at the 6th step was measured again, not taken as
	// the knee.
	if cal.Readings[0] < KneeShare*4000/calGrowth {
		t.Errorf("the coarse ramp read %.0f: one stall ended it", cal.Readings[0])
	}
	for i := 1; i < len(cal.Steps); i++ {
		if s, p := cal.Steps[i], cal.Steps[i-1]; s.Ramp < p.Ramp {
			t.Errorf("step %d belongs to ramp %d after ramp %d", i, s.Ramp, p.Ramp)
		}
	}
}

func TestCalibrationThatNeverAgreesIsAnError(t *testing.T) {
	// The knee moves by 1.5x between ramps: what this machine did while
	// its replica replayed the table's load.
	m := &machine{knees: []float64{4000, 3000, 2000, 4500, 6750}}
	cal, err := search(0.5, 50, m.measure, quiet)
	if err == nil {
		t.Fatalf("rate %.0f from readings %v; want an error: no two fine ramps agreed", cal.Rate, cal.Readings)
	}
	for _, want := range []string{"did not settle", "no two of 4 fine ramps agreed within 20%", "give --rate", "knee"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Every fine ramp ran before it gave up.
	if n := m.ramp + 1; n != 1+CalMaxRamps {
		t.Errorf("%d ramps ran; want the coarse one and %d fine ones", n, CalMaxRamps)
	}
}

func TestCalibrationIgnoresAReadingThatAgreedWithNone(t *testing.T) {
	// The first fine ramp meets a slow moment (a knee of 1,500); the next
	// two find 4,000 again.
	m := &machine{knees: []float64{4000, 1500, 4000, 4000}}
	cal, err := search(0.5, 50, m.measure, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if len(cal.Readings) != 4 {
		t.Fatalf("readings %v; want the coarse ramp and three fine ones", cal.Readings)
	}
	if want := KneeShare * 4000; cal.Rate > want || cal.Rate < want/calFineGrowth {
		t.Errorf("rate %.0f; want the lower of the two that agreed, a quarter of 4,000 within a fine step (readings %v)", cal.Rate, cal.Readings)
	}
}

func TestCalibrationToALoadTarget(t *testing.T) {
	// A big machine: the load reaches 0.5 at 10,000 tx/s, long before
	// the knee.
	m := &machine{knees: []float64{1e9}, loadPer: 0.5 / 10000, loadSpikes: map[int]bool{9: true}}
	cal, err := search(0.5, 50, m.measure, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(cal.Rate-10000) > 100 {
		t.Errorf("rate %.0f, want 10,000 interpolated (%s)", cal.Rate, cal.Why)
	}
	// One step whose load read high was measured again, not taken as the
	// target.
	if cal.Readings[0] < 10000/calGrowth {
		t.Errorf("the coarse ramp read %.0f: one load spike ended it", cal.Readings[0])
	}
}

func TestCalibrationStopsOnAMeasurementError(t *testing.T) {
	m := &machine{knees: []float64{4000}, failAtStep: 15}
	if _, err := search(0.5, 50, m.measure, quiet); err == nil || !strings.Contains(err.Error(), "went away") {
		t.Fatalf("error %v, want the measurement's", err)
	}
}
