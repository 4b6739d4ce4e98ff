package replay

import (
	"slices"
	"strings"
	"testing"
)

// A trace read 10 times a second: the budget at 10, cut 0.3 s into the
// disturbance, halved, and back at 8 (80 %) 2.5 s after the relief; the
// second onset never cuts.
func TestStepAnalyseTimesTheCutAndTheRecovery(t *testing.T) {
	var s StepRun
	add := func(from, to float64, on bool, rate func(t float64) float64) {
		for t := from; t < to-1e-9; t += 0.1 {
			s.Samples = append(s.Samples, StepSample{T: t, On: on, Rate: rate(t)})
		}
	}
	add(0, 5, false, func(float64) float64 { return 10 })
	add(5, 10, true, func(t float64) float64 {
		if t < 5.3-1e-9 {
			return 10
		}
		return 5
	})
	add(10, 20, false, func(t float64) float64 {
		if t < 12.5-1e-9 {
			return 5
		}
		return 8
	})
	add(20, 25, true, func(float64) float64 { return 8 })
	add(25, 30, false, func(float64) float64 { return 8 })
	reps := s.Analyse()
	if len(reps) != 2 {
		t.Fatalf("%d reps, want 2: %+v", len(reps), reps)
	}
	near := func(a, b float64) bool { return a-b < 0.051 && b-a < 0.051 }
	if r := reps[0]; !near(r.Onset, 5) || r.Before != 10 || !near(r.Cut, 0.3) || r.Trough != 5 || !near(r.Relief, 10) || !near(r.Recover, 2.5) {
		t.Errorf("first rep %+v: want onset 5, before 10, cut 0.3, trough 5, relief 10, recover 2.5", r)
	}
	if r := reps[1]; r.Cut != -1 || r.Recover != 0 {
		t.Errorf("second rep %+v: want no cut (-1) and nothing to recover (0)", r)
	}
	// The rep without a cut does not set the bound; the paced one does.
	if longest, known := StepLongest([]*StepRun{&s}); !known || longest < 2.45 || longest > 2.55 {
		t.Errorf("bound %.2f (known %v), want 2.5 from the paced rep", longest, known)
	}
	if doc := StepSection([]*StepRun{&s}, "throttled bench step"); !strings.Contains(doc, "at least three times it, 8 s") || !strings.Contains(doc, "| no cut |") {
		t.Errorf("the section does not give the 8 s window, or the rep without a cut:\n%s", doc)
	}
	// A third onset that cuts and never recovers makes the bound unknown;
	// one that pauses (to 0) is not a pacing step and leaves it.
	paused := s
	paused.Samples = append(slices.Clone(s.Samples), StepSample{T: 30, On: true, Rate: 8}, StepSample{T: 30.1, On: true, Rate: 0}, StepSample{T: 30.2, Rate: 0}, StepSample{T: 30.3, Rate: 0})
	if longest, known := StepLongest([]*StepRun{&paused}); !known || longest > 2.55 {
		t.Errorf("a pause changed the bound: %.2f (known %v)", longest, known)
	}
	stuck := s
	stuck.Samples = append(slices.Clone(s.Samples), StepSample{T: 30, On: true, Rate: 8}, StepSample{T: 30.1, On: true, Rate: 2}, StepSample{T: 30.2, Rate: 2}, StepSample{T: 30.3, Rate: 2})
	if _, known := StepLongest([]*StepRun{&stuck}); known {
		t.Error("a paced rep that never recovered, and still the bound is known")
	}
}

// The transients per scenario: nearest-rank percentiles of the cut delay
// and the recovery over the paced reps only, and the cut goal's verdict.
func TestStepSummaryPercentiles(t *testing.T) {
	var s StepRun
	s.Scenario = "surge"
	tm := 0.0
	add := func(n int, on bool, rate float64) {
		for range n {
			s.Samples = append(s.Samples, StepSample{T: tm, On: on, Rate: rate})
			tm += 0.1
		}
	}
	add(10, false, 10)
	// Ten paced onsets: cut after 0.1 .. 1.0 s, recovered 1 .. 10 s
	// after the relief; then one that never cuts.
	for i := 1; i <= 10; i++ {
		add(i, true, 10)
		add(5, true, 4)
		add(10*i, false, 4)
		add(10, false, 9)
	}
	add(20, true, 9)
	add(10, false, 9)
	sum := StepSummary([]*StepRun{&s})
	if len(sum) != 1 {
		t.Fatalf("%d scenarios, want 1", len(sum))
	}
	st := sum[0]
	near := func(a, b float64) bool { return a-b < 0.051 && b-a < 0.051 }
	if st.Onsets != 11 || st.Paced != 10 || st.Recovered != 10 || !near(st.CutP50, 0.5) || !near(st.CutP95, 1.0) || !near(st.RecoverP50, 5) || !near(st.RecoverP95, 10) {
		t.Fatalf("summary %+v: want 11 onsets, 10 paced and recovered, cut p50 0.5 p95 1.0, recover p50 5 p95 10", st)
	}
	if doc := StepSection([]*StepRun{&s}, "throttled bench step"); !strings.Contains(doc, "| surge | 11 | 10 | 0.5 | 1.0 | 10 | 5.0 | 10.0 | met |") {
		t.Errorf("the section's summary row is not the summary:\n%s", doc)
	}
}
