//go:build lab

package main

import (
	"slices"
	"sync"
	"time"

	"github.com/throttled/throttled/internal/lab/plots"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// demoTimeline records, once a decision, the series the overview
// dashboard shows, so the demo can draw them (Grafana is not part of it).
type demoTimeline struct {
	mu       sync.Mutex
	job      string
	o        plots.Overview
	lastRows int64
	lastAt   time.Time
	holdSeen map[string]*plots.Region
}

func newDemoTimeline(job string) *demoTimeline {
	return &demoTimeline{job: job, holdSeen: map[string]*plots.Region{}, o: plots.Overview{
		Title: "throttled overview, from the demo's own decisions", Target: 0.7, Critical: 1,
		JobRates: map[string][]plots.Point{}, RowsPerSecond: map[string][]plots.Point{}, Lag: map[string][]plots.Point{},
	}}
}

func (tl *demoTimeline) add(at time.Time, snap signals.Snapshot, d throttle.Decision, st jobs.Status, active []hold.Hold) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	o := &tl.o
	o.Mode = append(o.Mode, plots.Point{T: at, V: float64(max(0, slices.Index(plots.Modes, string(d.Mode))))})
	o.Budget = append(o.Budget, plots.Point{T: at, V: d.Budget})
	o.JobRates[tl.job] = append(o.JobRates[tl.job], plots.Point{T: at, V: st.Rate})
	if !tl.lastAt.IsZero() {
		if dt := at.Sub(tl.lastAt).Seconds(); dt > 0 {
			o.RowsPerSecond[tl.job] = append(o.RowsPerSecond[tl.job], plots.Point{T: at, V: float64(st.Rows-tl.lastRows) / dt})
		}
	}
	tl.lastRows, tl.lastAt = st.Rows, at
	for _, x := range snap.Samples {
		if x.Err != nil {
			continue
		}
		switch x.Name {
		case signals.PrimaryLoad:
			o.Load = append(o.Load, plots.Point{T: at, V: x.Value})
		case signals.ConnectionHeadroom:
			o.Headroom = append(o.Headroom, plots.Point{T: at, V: x.Value})
		case signals.ReplicaLagSeconds:
			r := x.Labels[signals.LabelReplica]
			o.Lag[r] = append(o.Lag[r], plots.Point{T: at, V: x.Value})
		}
	}
	// A hold's region runs from when it was made to the last decision
	// that still saw it.
	for _, h := range active {
		if r, ok := tl.holdSeen[h.ID]; ok {
			r.End = at
			continue
		}
		tl.holdSeen[h.ID] = &plots.Region{Start: h.Created, End: at, Label: string(h.Source) + " hold " + h.ID}
	}
}

func (tl *demoTimeline) overview() plots.Overview {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	o := tl.o
	o.Holds = nil
	for _, r := range tl.holdSeen {
		o.Holds = append(o.Holds, *r)
	}
	return o
}
