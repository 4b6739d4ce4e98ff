package replay

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

func TestStealShare(t *testing.T) {
	a := procfs.CPUStat{User: 100, System: 50, Idle: 1000, Iowait: 10, Steal: 5}
	for _, tc := range []struct {
		name string
		b    procfs.CPUStat
		want float64
	}{
		// 9 s busy and 1 s stolen: a tenth of the 10 s wanted.
		{"steal over busy plus steal", procfs.CPUStat{User: 106, System: 53, Idle: 1100, Iowait: 30, Steal: 6}, 0.1},
		// Idle and iowait are not wanted CPU time, however long.
		{"idle does not dilute it", procfs.CPUStat{User: 106, System: 53, Idle: 9000, Iowait: 500, Steal: 6}, 0.1},
		{"nothing stolen", procfs.CPUStat{User: 110, System: 50, Idle: 1000, Iowait: 10, Steal: 5}, 0},
		{"nothing wanted", procfs.CPUStat{User: 100, System: 50, Idle: 1100, Iowait: 10, Steal: 5}, 0},
	} {
		if got := stealShare(a, tc.b); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: stealShare = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStealMeterReadsThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/stat is Linux's")
	}
	m := startSteal()
	if m.err != nil {
		t.Fatal(m.err)
	}
	// Want some CPU time between the readings (the kernel counts it in
	// ticks), then read the share.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
	}
	if s := m.share(); s < 0 || s > 1 {
		t.Errorf("steal share %v, want one in [0, 1]", s)
	}
	if s := (stealMeter{err: errors.New("no /proc")}).share(); s != stealUnknown {
		t.Errorf("unreadable: steal share %v, want %v", s, stealUnknown)
	}
}

func TestUndisturbedRunsAgainWhileStolen(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max       float64
		reruns    int
		steals    []float64 // the runs' steal shares, in order
		kept      float64
		discarded int
		disturbed bool
	}{
		{"a quiet run is kept", 0.03, 2, []float64{0.01}, 0.01, 0, false},
		{"stolen runs are run again", 0.03, 2, []float64{0.2, 0.05, 0.02}, 0.02, 2, false},
		{"the last is kept, marked", 0.03, 2, []float64{0.2, 0.05, 0.1, 0.01}, 0.1, 2, true},
		{"no re-runs", 0.03, -1, []float64{0.2, 0.01}, 0.2, 0, true},
		{"no limit", -1, 2, []float64{0.5}, 0.5, 0, false},
		{"unknown steal is kept", 0.03, 2, []float64{stealUnknown}, stealUnknown, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			var discarded []Result
			r, disturbed, err := undisturbed(tc.max, tc.reruns, func(r Result) float64 { return r.Steal }, func() (Result, error) {
				n++
				return Result{Steal: tc.steals[n-1]}, nil
			}, func(r Result) { discarded = append(discarded, r) })
			if err != nil {
				t.Fatal(err)
			}
			if r.Steal != tc.kept || len(discarded) != tc.discarded || disturbed != tc.disturbed {
				t.Errorf("kept steal %v (disturbed %v) after discarding %d; want %v (%v) after %d", r.Steal, disturbed, len(discarded), tc.kept, tc.disturbed, tc.discarded)
			}
		})
	}
	t.Run("an error ends it", func(t *testing.T) {
		n := 0
		_, _, err := undisturbed(0.03, 2, func(r Result) float64 { return r.Steal }, func() (Result, error) {
			n++
			return Result{}, errors.New("restore failed")
		}, func(Result) { t.Error("a failed run was discarded") })
		if err == nil || n != 1 {
			t.Errorf("error %v after %d runs, want the first run's", err, n)
		}
	})
}

func TestTablesNameTheRunsDiscardedForSteal(t *testing.T) {
	rs := []Result{
		{Scenario: "surge", Policy: PolicyForeground, Rep: 1, P99: 2 * time.Millisecond, Steal: 0.004},
		{Scenario: "surge", Policy: PolicyAdaptive, Rep: 1, P99: 3 * time.Millisecond, Steal: 0.12, Disturbed: true},
	}
	rep := &Report{Repeat: 1, MaxSteal: 0.03, Reruns: 2, Scenarios: []Scenario{{Name: "surge", Description: "foreground arrivals double"}}, Results: rs, Summaries: summarize(rs),
		Discarded: []Result{{Scenario: "surge", Policy: PolicyAdaptive, Rep: 1, P99: 14 * time.Millisecond, Steal: 0.21}}}
	got := rep.Section("throttled bench replay")
	for _, want := range []string{
		"max steal % |", "| 0.4 |", "| 12.0 (1 kept over) |",
		"Run again because the hypervisor took more than 3.0 % of the CPU time the machine wanted (steal): adaptive 1/1 (steal 21.0 %, p99 14.0 ms).",
		"a run over 3.0 % was discarded and run again, at most 2 times",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
}

// A run kept over the steal limit counts only in a row with no run under
// it: foreground alone's disturbed run does not loosen the baseline, and
// the table says it was left out.
func TestDisturbedRunsAreLeftOutWhereARowHasAQuietOne(t *testing.T) {
	rs := []Result{
		{Scenario: "surge", Policy: PolicyForeground, Rep: 1, P99: 3 * time.Millisecond, Steal: 0.01},
		{Scenario: "surge", Policy: PolicyAdaptive, Rep: 1, P99: 4 * time.Millisecond, Steal: 0.15, Disturbed: true},
		{Scenario: "surge", Policy: "fixed-1", FixedRate: 1, Rep: 1, P99: 3200 * time.Microsecond, Rows: 10, Steal: 0.01},
		{Scenario: "surge", Policy: "fixed-4", FixedRate: 4, Rep: 1, P99: 4 * time.Millisecond, Rows: 40, Steal: 0.02},
		{Scenario: "surge", Policy: PolicyForegroundAgain, Rep: 1, P99: 13 * time.Millisecond, Steal: 0.16, Disturbed: true},
	}
	ss := summarize(rs)
	by := map[string]Summary{}
	for _, s := range ss {
		by[s.Policy] = s
	}
	fg := by[PolicyForeground]
	if fg.Runs != 1 || fg.P99 != 3*time.Millisecond || fg.LeftOut != 1 || fg.Disturbed != 0 || fg.StealMax != 0.01 {
		t.Fatalf("foreground alone: %+v; want the quiet run's 3 ms alone, the disturbed one left out", fg)
	}
	// Against 3 ms (not the mean of 3 and 13), fixed-4's 4 ms is over +10 %
	// and fixed-1's 3.2 ms within: fixed-1 is the oracle.
	if !by["fixed-1"].Oracle || by["fixed-4"].Oracle {
		t.Errorf("oracle: fixed-1 %v, fixed-4 %v; want fixed-1, the one within +10 %% of the quiet baseline", by["fixed-1"].Oracle, by["fixed-4"].Oracle)
	}
	// A row with no quiet run keeps its disturbed one, marked.
	if a := by[PolicyAdaptive]; a.Runs != 1 || a.P99 != 4*time.Millisecond || a.Disturbed != 1 || a.LeftOut != 0 || a.P99VsForeground != 4.0/3 {
		t.Errorf("adaptive: %+v; want its one disturbed run counted, marked, against the 3 ms baseline", a)
	}
	rep := &Report{Repeat: 1, MaxSteal: 0.03, Reruns: 2, Scenarios: []Scenario{{Name: "surge", Description: "d"}}, Results: rs, Summaries: ss}
	got := rep.Section("throttled bench replay")
	for _, want := range []string{"| foreground | 1 |", "| 1.0 (1 over, left out) |", "| 15.0 (1 kept over) |", "counts in its row only where the row has no run under it"} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
}

func TestCalibrationTableShowsSteal(t *testing.T) {
	rep := &Report{Calibration: &Calibration{Target: 0.5, Rate: 100, Why: "w",
		Steps: []CalibrationStep{{Ramp: 0, Rate: 50, TPS: 50, Load: 0.1, P99: time.Millisecond, Steal: 0.025}, {Ramp: 1, Rate: 75, TPS: 75, Load: 0.2, P99: time.Millisecond, Steal: stealUnknown}}}}
	var b strings.Builder
	rep.WriteCalibration(&b)
	for _, want := range []string{"| steal % |", "| 0 | 50 | 50 | 0.10 | 1.0 | 2.5 |", "| 1 | 75 | 75 | 0.20 | 1.0 | - |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("calibration table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSecondStealReadsTheWorstSecond(t *testing.T) {
	perSec := []float64{0.01, 0.02, 0.40, 0.0}
	for _, tc := range []struct {
		i    int
		want float64
	}{{2, 0.40}, {0, 0.01}, {4, stealUnknown}, {-1, stealUnknown}} {
		if got := secondSteal(perSec, tc.i); got != tc.want {
			t.Errorf("second %d: %v, want %v", tc.i, got, tc.want)
		}
	}
}
