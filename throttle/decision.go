package throttle

import (
	"time"

	"github.com/throttled/throttled/throttle/hold"
	"github.com/throttled/throttled/throttle/limit"
)

// Mode is the controller's state.
type Mode string

// Modes, from least to most restrictive.
const (
	// ModeRunning: no signal binds; the budget may grow.
	ModeRunning Mode = "running"
	// ModeThrottled: a signal is near or over its target; the budget holds
	// or is being cut.
	ModeThrottled Mode = "throttled"
	// ModePaused: a hold applies to every job.
	ModePaused Mode = "paused"
	// ModeCritical: a signal stayed at or past its critical level; every
	// job is paused and a page was raised (Decision.Latched when it waits
	// for a person).
	ModeCritical Mode = "critical"
	// ModeStale: a required signal is too old or unreadable; budget 0.
	ModeStale Mode = "stale"
)

// JobState is one job's state in a decision.
type JobState string

// Job states.
const (
	JobRunning   JobState = "running"
	JobThrottled JobState = "throttled"
	JobPaused    JobState = "paused"
)

// JobDecision is one job's share of a decision.
type JobDecision struct {
	limit.Allocation
	State JobState
	// Code says why, as one of a closed set; Reason says why in words
	// ("" when running freely).
	Code   Code
	Reason string
	// Holds are the holds that apply to the job.
	Holds []hold.Hold
}

// Decision is the controller's output for one tick.
type Decision struct {
	At   time.Time
	Mode Mode
	// Budget is the total rate, in tokens (batches) per second, that all
	// jobs together may use now: 0 unless Mode is running or throttled.
	Budget float64
	// Binding is the signal with the highest pressure (such as
	// primary_load, or replica_lag_seconds with the label replica="r1"),
	// or the signal that made the mode; zero when none does.
	Binding Binding
	// Pressure is the binding signal's value over its target (target over
	// value for connection_headroom): above 1 is over target.
	Pressure float64
	// Code is why the budget is what it is, as one of a closed set;
	// Reason is a human-readable account of the mode and the budget.
	Code   Code
	Reason string
	// Latched is true in a critical pause that only a person can end
	// (Controller.Resume).
	Latched bool
	// Foreground is how stretched the foreground is: the foreground_latency
	// rule's worse pressure (smoothed or raw), its latency's excess over
	// the baseline against the excess the target allows, so 0 at the
	// baseline and above 1 slower than it may be. It is 1 while that rule
	// is configured but its sample is unusable (not known to be fine).
	// ForegroundAt is its sample's time (the decision's while unusable),
	// zero when the rule is not configured. Jobs size their batches by
	// it: see [Pacer.ForegroundStretch].
	Foreground   float64
	ForegroundAt time.Time
	// Jobs holds each registered job's allocation.
	Jobs map[Job]JobDecision
	// Events are what happened at this tick: mode changes and pages.
	Events []Event
}

// EventKind names an event.
type EventKind string

// Event kinds. EventCritical, EventLatched and EventExemptCritical are
// pages; EventRecovered resolves them.
const (
	EventCritical  EventKind = "critical"
	EventLatched   EventKind = "latched"
	EventRecovered EventKind = "recovered"
	EventResumed   EventKind = "resumed" // a person ended a latch
	EventStale     EventKind = "stale"
	EventFresh     EventKind = "fresh"
	EventPaused    EventKind = "paused"
	EventUnpaused  EventKind = "unpaused"
	// EventExemptCritical: a job an exemption hold covers runs while the
	// cluster is critical. It pages: someone chose to run through it.
	EventExemptCritical EventKind = "exempt_critical"
)

// Event is something a person or the audit log should hear about.
type Event struct {
	Kind EventKind
	At   time.Time
	// Signal is the key of the signal involved, if any.
	Signal string
	// Value and Threshold are the signal's reading and the level it
	// crossed.
	Value, Threshold float64
	// Jobs are the jobs that were running, with their rates, when a pause
	// began.
	Jobs []JobRate
	// Message is a one-line account for a page or the audit log.
	Message string
}

// Page reports whether the event should page a person.
func (e Event) Page() bool {
	return e.Kind == EventCritical || e.Kind == EventLatched || e.Kind == EventExemptCritical
}

// JobRate is a job and its rate.
type JobRate struct {
	Job  Job
	Rate float64
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
