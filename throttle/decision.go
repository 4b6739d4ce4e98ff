package throttle

import (
	"slices"
	"time"

	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
	"github.com/throttled/throttled/throttle/limit"
)

// JobDecision is one job's share of a decision.
type JobDecision struct {
	limit.Allocation
	State status.JobState
	// Code says why, as one of a closed set; Reason says why in words
	// ("" when running freely).
	Code   status.Code
	Reason string
	// Holds are the holds that apply to the job.
	Holds []hold.Hold
}

// Decision is the controller's output for one tick.
type Decision struct {
	At   time.Time
	Mode status.Mode
	// Budget is the total rate, in tokens (batches) per second, that all
	// jobs together may use now: 0 unless Mode is running or throttled.
	Budget float64
	// Binding is the signal with the highest pressure (such as
	// primary_load, or replica_lag_seconds with the label replica="r1"),
	// or the signal that made the mode; zero when none does.
	Binding status.Binding
	// Pressure is the binding signal's value over its target (target over
	// value for connection_headroom): above 1 is over target.
	Pressure float64
	// Code is why the budget is what it is, as one of a closed set;
	// Reason is a human-readable account of the mode and the budget.
	Code   status.Code
	Reason string
	// Latched is true in a critical pause that only a person can end
	// (Controller.Resume).
	Latched bool
	// Foreground is how stretched the foreground is: the foreground_latency
	// rule's worse pressure (smoothed or raw; the raw one where a new
	// sample is under target while the smoothed one lags over it), its latency's excess over
	// the baseline against the excess the target allows, so 0 at the
	// baseline and above 1 slower than it may be. It is 1 while that rule
	// is configured but its sample is unusable (not known to be fine).
	// ForegroundAt is its sample's time (the decision's while unusable),
	// zero when the rule is not configured. Jobs size their batches by
	// it: see the jobs package's Stretcher.
	Foreground   float64
	ForegroundAt time.Time
	// Jobs holds each registered job's allocation.
	Jobs map[status.Job]JobDecision
	// Events are what happened at this tick: mode changes and pages.
	Events []status.Event
}

// Feedback is what a job reports after each batch attempt, retries
// included.
type Feedback struct {
	// Rows the batch processed.
	Rows int64
	// Duration of the batch.
	Duration time.Duration
	// Err is the batch's error, nil on success.
	Err error
}

// Status is job j's status in d, typed: its state, code, reason, rate and
// holds, and d's binding signal; false when d does not include j.
func (d Decision) Status(j status.Job) (status.JobStatus, bool) {
	jd, ok := d.Jobs[j]
	if !ok {
		return status.JobStatus{}, false
	}
	return status.JobStatus{Job: j, State: jd.State, Code: jd.Code, Reason: jd.Reason, Binding: d.Binding, Rate: jd.Rate,
		Holds: slices.Clone(jd.Holds)}, true
}
