package status

import "time"

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
