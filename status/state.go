package status

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
