package status

import (
	"maps"
	"slices"
	"testing"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle/hold"
)

// A job's why comes from its code, its binding and its holds, never from
// its reason's text, and is always one word of the bounded set.
func TestWhyOfIsBoundedAndFromTheCode(t *testing.T) {
	manual := hold.Hold{ID: "h12", Source: hold.SourceManual, Reason: "vacuum first: 42 rows"}
	grafana := hold.Hold{ID: "h13", Source: hold.SourceGrafanaAlert, Ratio: 0.5}
	for _, tc := range []struct {
		st   JobStatus
		want Why
	}{
		{JobStatus{State: JobRunning, Code: CodeMaxRate, Binding: Binding{Signal: "primary_load"}}, WhyFullRate},
		{JobStatus{State: JobRunning, Code: CodeRunning, Binding: Binding{Signal: "primary_load"}}, WhyGrowth},
		{JobStatus{State: JobRunning, Code: CodeBinding, Binding: Binding{Signal: "foreground_latency"}}, "foreground_latency"},
		{JobStatus{State: JobThrottled, Code: CodeCut, Binding: Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "r1"}}}, "replica_lag_seconds"},
		{JobStatus{State: JobThrottled, Code: CodeHolding, Binding: Binding{Signal: "connection_headroom"}}, "connection_headroom"},
		{JobStatus{State: JobThrottled, Code: CodeHolding, Binding: Binding{Signal: "job_error_fraction"}}, WhyBatchErrors},
		{JobStatus{State: JobThrottled, Code: CodeTooSlow, Binding: Binding{Signal: "primary_load"}}, "primary_load"},
		// A signal no rule may name, or none, is the fallback word.
		{JobStatus{State: JobThrottled, Code: CodeCut, Binding: Binding{Signal: "my_custom", Labels: map[string]string{"x": "1"}}}, WhyOther},
		{JobStatus{State: JobThrottled, Code: CodeTooSlow}, WhyOther},
		{JobStatus{State: JobRunning, Code: CodeSlowStart}, WhySlowStart},
		{JobStatus{State: JobRunning, Code: CodeInherited}, WhySlowStart},
		{JobStatus{State: JobRunning, Code: CodeBreach, Binding: Binding{Signal: "foreground_latency"}}, WhyBreach},
		{JobStatus{State: JobRunning, Code: CodeLowUtilization}, WhyLowUtilization},
		{JobStatus{State: JobRunning, Code: CodeNotGrowing}, WhyNotGrowing},
		{JobStatus{State: JobPaused, Code: CodeWarmingUp, Binding: Binding{Signal: "foreground_latency"}}, WhyWarmingUp},
		{JobStatus{State: JobPaused, Code: CodeUnavailable, Reason: "paused: hold h9 on all"}, WhyUnavailable},
		{JobStatus{State: JobThrottled, Code: CodeExempt}, WhyExempt},
		{JobStatus{State: JobPaused, Code: CodeGated, Binding: Binding{Signal: "primary_load"}}, WhyGated},
		{JobStatus{State: JobPaused, Code: CodeCritical, Binding: Binding{Signal: "primary_load"}}, WhyCritical},
		{JobStatus{State: JobPaused, Code: CodeStale, Binding: Binding{Signal: "replica_lag_seconds"}}, WhyStale},
		{JobStatus{State: JobPaused, Code: CodeHeld, Holds: []hold.Hold{manual, grafana}}, "hold:manual"},
		{JobStatus{State: JobPaused, Code: CodeHeld, Holds: []hold.Hold{{ID: "w", Source: hold.SourceWindow}}}, "hold:window"},
		{JobStatus{State: JobPaused, Code: CodeHeld, Holds: []hold.Hold{{ID: "x", Source: "someone's script"}}}, "hold:other"},
		{JobStatus{State: JobPaused, Code: CodeHeld}, "hold:other"},
		// A scaled job's why is the hold that scales it.
		{JobStatus{State: JobThrottled, Code: CodeScaled, Holds: []hold.Hold{{ID: "e", Source: hold.SourceCLI}, grafana}}, "hold:grafana-alert"},
		// No code: the state decides, as CodeOf says.
		{JobStatus{State: JobRunning}, WhyGrowth},
		{JobStatus{State: JobPaused}, WhyUnavailable},
		{JobStatus{State: JobRunning, Code: "from_a_newer_leader"}, WhyOther},
	} {
		got := WhyOf(tc.st)
		if got != tc.want {
			t.Errorf("WhyOf(%s, binding %q) = %q; want %q", tc.st.Code, tc.st.Binding, got, tc.want)
		}
		if !slices.Contains(Whys(), got) {
			t.Errorf("WhyOf(%s) = %q is not in Whys()", tc.st.Code, got)
		}
	}
}

// Whatever the code, binding and hold source, the why is in the bounded
// set: the label's values cannot grow with input.
func TestWhyOfEveryCombinationIsInTheSet(t *testing.T) {
	codes := []Code{"", CodeRunning, CodeBinding, CodeSlowStart, CodeInherited, CodeBreach, CodeMaxRate, CodeLowUtilization, CodeNotGrowing,
		CodeHolding, CodeCut, CodeTooSlow, CodeScaled, CodeExempt, CodeHeld, CodeGated, CodeCritical, CodeStale, CodeWarmingUp, CodeUnavailable, "bogus"}
	bindings := []Binding{{}, {Signal: signals.PrimaryLoad}, {Signal: signals.ReplicaLagBytes, Labels: map[string]string{signals.LabelReplica: `r"1`}},
		{Signal: BindingErrors}, {Signal: signals.VacuumRunning, Labels: map[string]string{signals.LabelTable: "t"}}, {Signal: "{"}, {Signal: "anything at all"}}
	sources := []hold.Source{"", hold.SourceManual, hold.SourceAuto, hold.SourceGrafanaAlert, hold.SourceCLI, hold.SourceWindow, "x:y"}
	set := Whys()
	seen := map[Why]bool{}
	for _, c := range codes {
		for _, b := range bindings {
			for _, s := range sources {
				w := WhyOf(JobStatus{Code: c, Binding: b, Holds: []hold.Hold{{Source: s, Ratio: 0.5}}})
				if !slices.Contains(set, w) {
					t.Fatalf("WhyOf(%q, %q, %q) = %q: not in the set", c, b, s, w)
				}
				seen[w] = true
			}
		}
	}
	if len(seen) < 15 {
		t.Fatalf("only %d whys reached: %v", len(seen), slices.Sorted(maps.Keys(seen)))
	}
	if !slices.IsSorted(set) || len(slices.Compact(slices.Clone(set))) != len(set) {
		t.Fatalf("Whys() not sorted or repeats: %v", set)
	}
}

// The summary line: the seconds' sum, then each why's share in whole
// percent adding up to 100, largest first, zero shares left out.
func TestWhySlowSummary(t *testing.T) {
	for _, tc := range []struct {
		secs map[Why]float64
		want string
	}{
		{map[Why]float64{WhyFullRate: 30, "foreground_latency": 202.5, WhySlowStart: 17.5},
			"ran 4m10s: 81 % limited by foreground_latency, 12 % at full rate, 7 % slow start"},
		// Thirds add up to 100; ties go by the why's name.
		{map[Why]float64{WhyGrowth: 1, WhyFullRate: 1, "hold:manual": 1},
			"ran 3s: 34 % at full rate, 33 % growing, 33 % held (manual)"},
		// A share that rounds to 0 is left out; a zero one too.
		{map[Why]float64{WhyFullRate: 999, WhyStale: 1, WhyCritical: 0, WhyBreach: 0.001},
			"ran 16m40s: 100 % at full rate"},
		{map[Why]float64{WhyBatchErrors: 0.25, WhyBreach: 0.25}, "ran 500ms: 50 % limited by batch errors, 50 % below a recent breach"},
		{nil, "ran 0s"},
	} {
		if got := WhySlow(tc.secs); got != tc.want {
			t.Errorf("WhySlow(%v) = %q; want %q", tc.secs, got, tc.want)
		}
		sum := 0
		for _, s := range Shares(tc.secs) {
			sum += s.Percent
		}
		if len(tc.secs) > 0 && sum != 100 {
			t.Errorf("Shares(%v) add up to %d", tc.secs, sum)
		}
	}
}

// A Prometheus signal (an external one) that limits a job is the job's
// why under its own name, when the caller passes the configuration's
// external signals; one it does not pass is other. The set grows by
// exactly those names.
func TestWhyOfAnExternalSignal(t *testing.T) {
	st := JobStatus{State: JobThrottled, Code: CodeCut, Binding: Binding{Signal: "api_p99"}}
	if w := WhyOf(st); w != WhyOther {
		t.Errorf("without the external signals: %q; want other", w)
	}
	ext := []signals.Name{"api_p99", "app_errors"}
	if w := WhyOf(st, ext...); w != "api_p99" {
		t.Errorf("with %v: %q; want api_p99", ext, w)
	}
	if w := WhyOf(JobStatus{Code: CodeCut, Binding: Binding{Signal: "elsewhere"}}, ext...); w != WhyOther {
		t.Errorf("a signal not passed: %q; want other", w)
	}
	if got, want := len(Whys(ext...)), len(Whys())+2; got != want || !slices.Contains(Whys(ext...), "app_errors") {
		t.Errorf("Whys(%v) has %d words, want %d with both names", ext, got, want)
	}
	if p := Why("api_p99").Phrase(); p != "limited by api_p99" {
		t.Errorf("phrase %q; want limited by api_p99", p)
	}
	if line := WhySlow(map[Why]float64{"api_p99": 3, WhyFullRate: 1}); line != "ran 4s: 75 % limited by api_p99, 25 % at full rate" {
		t.Errorf("WhySlow: %q", line)
	}
	// A word of the set, or a built-in signal's name, is never an
	// external signal's why.
	for _, n := range []signals.Name{"stale", "other", "growth", "primary_load"} {
		if w := WhyOf(JobStatus{Code: CodeCut, Binding: Binding{Signal: n}}, n); n != "primary_load" && w != WhyOther {
			t.Errorf("external %q: why %q; want other", n, w)
		}
	}
}
