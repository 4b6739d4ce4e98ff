package metrics

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// A job's why label is status.WhyOf of its status: the word every other
// edge uses (throttled_jobs_limited_seconds_total, the API, the CLI),
// from its code, never from its text: the hold's source (never its id,
// which grows without bound over a cluster's life), the binding signal's
// name, or the code's own word; no numbers, no free text. On the old code
// this label had words of its own: "no valid allocation" where the
// counter said unavailable, "binding primary_load" where it said
// primary_load, "hold h12" before that.
func TestJobStateWhyIsStatusWhy(t *testing.T) {
	h12 := hold.Hold{ID: "h12", Source: hold.SourceManual, Reason: "vacuum first: 42 rows"}
	w7 := hold.Hold{ID: "w7", Source: hold.SourceWindow, Reason: "avoid the nightly backup"}
	odd := hold.Hold{ID: "h99", Source: "someone-new", Reason: "a source this build does not know"}
	external := []signals.Name{"api_p99"}
	for _, tc := range []struct {
		st   status.JobStatus
		want status.Why
	}{
		{status.JobStatus{State: status.JobPaused, Code: status.CodeHeld, Reason: "paused: hold h12 on job:purge by alice (manual): vacuum first, until 2026-11-30T16:00:00Z", Holds: []hold.Hold{h12}}, "hold:manual"},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeHeld, Reason: "paused: hold w7", Holds: []hold.Hold{w7, h12}}, "hold:window"},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeHeld, Reason: "paused: hold h99", Holds: []hold.Hold{odd}}, "hold:other"},
		// A reason that reads like a hold is not one: the code decides.
		{status.JobStatus{State: status.JobPaused, Code: status.CodeUnavailable, Reason: "paused: hold h9 on all"}, status.WhyUnavailable},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeCut, Reason: "throttled: cut by 30%: primary_load at 1.3 of target", Binding: status.Binding{Signal: "primary_load"}}, "primary_load"},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeCut, Reason: "throttled: cut by 20%: api_p99 at 1.2 of target", Binding: status.Binding{Signal: "api_p99"}}, "api_p99"},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeHolding, Binding: status.Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "r1"}}}, "replica_lag_seconds"},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeCritical, Reason: "critical: primary_load reached 1.9 (critical 1)", Binding: status.Binding{Signal: "primary_load"}}, status.WhyCritical},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeStale, Reason: "stale: replica_lag_seconds (too old)", Binding: status.Binding{Signal: "replica_lag_seconds"}}, status.WhyStale},
		{status.JobStatus{State: status.JobRunning, Code: status.CodeSlowStart, Reason: "running: slow start: budget 2/s, doubling back toward 8/s"}, status.WhySlowStart},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeTooSlow, Reason: "throttled: 0.05 batches/s, one batch every 20s", Binding: status.Binding{Signal: "foreground_latency"}}, "foreground_latency"},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeGated, Reason: `gated: vacuum_running{table="public.events"} at 1, over 0`}, status.WhyGated},
		{status.JobStatus{State: status.JobRunning, Code: status.CodeMaxRate}, status.WhyFullRate},
		{status.JobStatus{State: status.JobRunning}, status.WhyGrowth},
	} {
		got := jobStateWhys(t, Job{Name: "purge", State: string(tc.st.State), Status: tc.st}, external)
		if len(got) != 1 || got[0] != string(tc.want) {
			t.Errorf("why of %s %q: %q; want %q", tc.st.Code, tc.st.Reason, got, tc.want)
		}
		if len(got) == 1 && !slices.Contains(status.Whys(external...), status.Why(got[0])) {
			t.Errorf("why %q is not in status.Whys", got[0])
		}
	}
	// A job whose state is unknown has counters and no state series.
	if got := jobStateWhys(t, Job{Name: "purge", Remaining: -1}, external); len(got) != 0 {
		t.Errorf("a job of unknown state has state series with why %q", got)
	}
}

// jobStateWhys gathers j's series and returns the why labels of its
// throttled_jobs_state series.
func jobStateWhys(t *testing.T, j Job, external []signals.Name) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(jobsCollector{jobs: []Job{j}, external: external})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var whys []string
	for _, mf := range mfs {
		if mf.GetName() != "throttled_jobs_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "why" {
					whys = append(whys, l.GetValue())
				}
			}
		}
	}
	return whys
}

// jobsCollector exports jobs as CollectJobs does.
type jobsCollector struct {
	jobs     []Job
	external []signals.Name
}

func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) { Describe(ch) }

func (c jobsCollector) Collect(ch chan<- prometheus.Metric) { CollectJobs(ch, c.jobs, c.external...) }
