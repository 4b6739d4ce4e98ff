package replay

import (
	"errors"
	"math"
	"runtime"
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
			var discarded []CalibrationStep
			r, disturbed, err := undisturbed(tc.max, tc.reruns, func(r CalibrationStep) float64 { return r.Steal }, func() (CalibrationStep, error) {
				n++
				return CalibrationStep{Steal: tc.steals[n-1]}, nil
			}, func(r CalibrationStep) { discarded = append(discarded, r) })
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
		_, _, err := undisturbed(0.03, 2, func(r CalibrationStep) float64 { return r.Steal }, func() (CalibrationStep, error) {
			n++
			return CalibrationStep{}, errors.New("measure failed")
		}, func(CalibrationStep) { t.Error("a failed run was discarded") })
		if err == nil || n != 1 {
			t.Errorf("error %v after %d runs, want the first run's", err, n)
		}
	})
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
