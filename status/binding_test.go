package status

import (
	"testing"

	"github.com/throttled/throttled/signals"
)

// A binding reads as its sample's key, compares by signal and labels (nil
// and empty labels alike), and names exactly the sample it was made from.
func TestBindingNamesItsSample(t *testing.T) {
	r1 := Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "r1"}}
	sample := func(name signals.Name, labels map[string]string) signals.Sample {
		return signals.Sample{Name: name, Labels: labels}
	}
	for _, tc := range []struct {
		b    Binding
		text string
	}{
		{Binding{}, ""},
		{Binding{Signal: signals.PrimaryLoad}, "primary_load"},
		{r1, `replica_lag_seconds{replica="r1"}`},
		{Binding{Signal: BindingErrors}, "job_error_fraction"},
	} {
		if got := tc.b.String(); got != tc.text {
			t.Errorf("%#v.String() = %q; want %q", tc.b, got, tc.text)
		}
		if tc.b.IsZero() != (tc.text == "") {
			t.Errorf("%#v.IsZero() = %v", tc.b, tc.b.IsZero())
		}
	}
	if !(Binding{Signal: signals.PrimaryLoad}).Equal(Binding{Signal: signals.PrimaryLoad, Labels: map[string]string{}}) {
		t.Error("nil and empty labels differ")
	}
	if r1.Equal(Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "r2"}}) || r1.Equal(Binding{Signal: signals.ReplicaLagSeconds}) {
		t.Error("bindings of two replicas, or of one and of none, are equal")
	}
	for _, tc := range []struct {
		s    signals.Sample
		want bool
	}{
		{sample(signals.ReplicaLagSeconds, map[string]string{signals.LabelReplica: "r1"}), true},
		{sample(signals.ReplicaLagSeconds, map[string]string{signals.LabelReplica: "r2"}), false},
		{sample(signals.ReplicaLagBytes, map[string]string{signals.LabelReplica: "r1"}), false},
		{sample(signals.ReplicaLagSeconds, nil), false},
	} {
		if got := r1.Of(tc.s); got != tc.want {
			t.Errorf("binding of %s: %v; want %v", tc.s.Key(), got, tc.want)
		}
	}
	if (Binding{}).Of(sample("", nil)) {
		t.Error("the zero binding names a sample")
	}
}

// A binding is a latency signal when it is the canary's foreground_latency
// or no built-in signal (a rule names only those and the controller's
// external, Prometheus, signals); the primary's own signals, replica lag
// and failing batches are not.
func TestBindingLatency(t *testing.T) {
	for _, tc := range []struct {
		b    Binding
		want bool
	}{
		{Binding{Signal: signals.ForegroundLatency}, true},
		{Binding{Signal: "api_p99"}, true},
		{Binding{}, false},
		{Binding{Signal: BindingErrors}, false},
		{Binding{Signal: signals.PrimaryLoad}, false},
		{Binding{Signal: signals.ConnectionHeadroom}, false},
		{Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "r1"}}, false},
		{Binding{Signal: signals.PgBouncerMaxWaitSecondsMax}, false},
	} {
		if got := tc.b.Latency(); got != tc.want {
			t.Errorf("%s.Latency() = %v; want %v", tc.b, got, tc.want)
		}
	}
	// Every built-in signal a rule may name but the canary is the
	// primary's (or a replica's, or PgBouncer's) own.
	for _, n := range RuleSignals() {
		if got := (Binding{Signal: n}).Latency(); got != (n == signals.ForegroundLatency) {
			t.Errorf("%s.Latency() = %v", n, got)
		}
	}
}
