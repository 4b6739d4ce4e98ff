//go:build lab

package main

import (
	"slices"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/lab/plots"
)

// drawOverview draws the overview's key series from Prometheus as one PNG
// at path, the plot the lab's demo draws.
func drawOverview(t *testing.T, ov overview, path string) {
	t.Helper()
	pts := func(in []point) []plots.Point {
		out := make([]plots.Point, len(in))
		for i, p := range in {
			out[i] = plots.Point{T: p.T, V: p.V}
		}
		return out
	}
	byLabel := func(in map[string][]point) map[string][]plots.Point {
		out := make(map[string][]plots.Point, len(in))
		for k, v := range in {
			out[k] = pts(v)
		}
		return out
	}
	o := plots.Overview{Title: "throttled overview, from Prometheus (test run)", Target: 0.7, Critical: 1,
		Load:          pts(ov.Load),
		Budget:        pts(ov.Budget),
		JobRates:      byLabel(ov.JobRates),
		RowsPerSecond: byLabel(ov.RowsPerSecond),
		Headroom:      pts(ov.Headroom),
		Lag:           byLabel(ov.Lag),
	}
	for mode, ps := range ov.Mode {
		i := slices.Index(plots.Modes, mode)
		for _, p := range ps {
			o.Mode = append(o.Mode, plots.Point{T: p.T, V: float64(i)})
		}
	}
	slices.SortFunc(o.Mode, func(a, b plots.Point) int { return a.T.Compare(b.T) })
	for _, s := range ov.Holds {
		o.Holds = append(o.Holds, plots.Regions(pts(s.points), 2*time.Second, s.labels["source"]+" hold "+s.labels["id"])...)
	}
	if len(o.Holds) == 0 {
		t.Fatal("the plot would lack holds: no hold region in the series")
	}
	if err := o.WritePNG(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("overview plot: %s", path)
}
