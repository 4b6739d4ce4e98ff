package throttled

import (
	"testing"
	"time"

	"github.com/throttled/throttled/internal/pacing"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// A coordinated worker whose own configuration lacks the leader's
// Prometheus signal (an exec run without the sidecar's file) counts the
// time that signal limits it under the signal's name, as the per-second
// binding it prints names it; a built-in signal keeps its own why, and a
// name no signal may have stays other.
func TestWorkerCountsTheLeadersPrometheusSignalByName(t *testing.T) {
	c := &Client{limited: pacing.NewLimitedTime(3 * time.Second)}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		signal string
		want   status.Why
	}{
		{"api_p99", "api_p99"},
		{"primary_load", "primary_load"},
		{"Not A Name", status.WhyOther},
	} {
		job := status.Job("purge_" + string(tc.want))
		for i := range 3 {
			c.observe(t0.Add(time.Duration(i)*time.Second), status.JobStatus{Job: job, State: status.JobThrottled, Code: status.CodeCut,
				Binding: status.Binding{Signal: signals.Name(tc.signal)}})
		}
		if got := c.limited.Seconds(t0.Add(2*time.Second), job); got[tc.want] != 2 {
			t.Errorf("binding %q: limited seconds %v, want 2 under %q", tc.signal, got, tc.want)
		}
	}
}
