package pacing

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/throttled/throttled/status"
)

// Each observation counts the time since the job's last one against the
// why observed then; a stalled loop counts for at most the cap; the open
// interval counts too, and the totals never go down.
func TestLimitedTimeCountsIntervalsCapped(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	lt := NewLimitedTime(3 * time.Second)
	if got := lt.Seconds(t0, "purge"); got != nil {
		t.Fatalf("a job never observed: %v; want nil", got)
	}
	obs := []struct {
		at  time.Duration
		why status.Why
	}{
		{0, status.WhyFullRate},
		{2 * time.Second, "foreground_latency"},
		{3 * time.Second, status.WhySlowStart},
		{60 * time.Second, status.WhyGrowth}, // a stall: slow_start counts 3 s, not 57
		{59 * time.Second, status.WhyStale},  // out of order: counts nothing, moves no clock back
	}
	var prev map[status.Why]float64
	for _, o := range obs {
		lt.Observe(t0.Add(o.at), "purge", o.why)
		got := lt.Seconds(t0.Add(o.at), "purge")
		for w, s := range prev {
			if got[w] < s {
				t.Fatalf("at %s: %s went down from %v to %v", o.at, w, s, got[w])
			}
		}
		prev = got
	}
	lt.Observe(t0.Add(61*time.Second), "other_job", status.WhyGated)
	got := lt.Seconds(t0.Add(61*time.Second), "purge")
	want := map[status.Why]float64{status.WhyFullRate: 2, "foreground_latency": 1, status.WhySlowStart: 3, status.WhyStale: 1}
	if !maps.Equal(got, want) {
		t.Fatalf("seconds %v; want %v", got, want)
	}
	// The open interval is capped too, and counted for the why observed.
	if got := lt.Seconds(t0.Add(10*time.Minute), "purge")[status.WhyStale]; got != 3 {
		t.Fatalf("open interval: stale %v s; want 3", got)
	}
	if js := lt.Jobs(); !slices.Equal(js, []status.Job{"other_job", "purge"}) {
		t.Fatalf("jobs %v", js)
	}
}
