package status

import (
	"maps"
	"slices"

	"github.com/throttled/throttled/signals"
)

// Binding is the signal that limits the budget, or that made a pause: a
// rule's signal and the labels of the sample the rule read (the replica,
// for a per-replica signal such as replica_lag_seconds). The zero Binding
// means none. It is a value to read, never text to parse: String gives the
// sample's key for people and logs, and Signal and Labels are what a
// program compares.
type Binding struct {
	Signal signals.Name
	// Labels are the sample's labels; nil for a signal without any.
	Labels map[string]string
}

// BindingErrors is the binding when failing batches, not a signal, limit
// the budget: the share of the error window's batches that failed, over
// the configured maximum.
const BindingErrors signals.Name = "job_error_fraction"

// IsZero reports whether b names no signal.
func (b Binding) IsZero() bool { return b.Signal == "" }

// String is b as a sample's key, such as primary_load or
// replica_lag_seconds{replica="r1"} ([signals.Sample.Key]); "" for none.
func (b Binding) String() string {
	if b.IsZero() {
		return ""
	}
	return signals.Sample{Name: b.Signal, Labels: b.Labels}.Key()
}

// Equal reports whether b and o name the same signal with the same labels
// (nil and empty labels are the same).
func (b Binding) Equal(o Binding) bool {
	return b.Signal == o.Signal && maps.Equal(b.Labels, o.Labels)
}

// Of reports whether sample s is the one b names.
func (b Binding) Of(s signals.Sample) bool {
	return !b.IsZero() && s.Name == b.Signal && maps.Equal(s.Labels, b.Labels)
}

// Latency reports whether b is a signal of the foreground's latency: the
// canary's foreground_latency, or one of the application's own signals (a
// Prometheus signal, such as its API's p99). A budget's binding is a
// rule's signal (or failing batches), and a rule names a built-in signal
// or one of the controller's external signals (throttle.Config.External):
// so any binding that is neither a built-in signal nor failing batches is
// an external one, known as such without the list, to a coordinated
// worker whose leader reads signals its own process does not.
func (b Binding) Latency() bool {
	switch {
	case b.IsZero() || b.Signal == BindingErrors:
		return false
	case b.Signal == signals.ForegroundLatency:
		return true
	}
	return !slices.Contains(ruleSignals, b.Signal)
}
