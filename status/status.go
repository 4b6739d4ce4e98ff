package status

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/throttled/throttled/throttle/hold"
)

// JobStatus is one job's status, produced in one place (the controller's
// decision, or a coordinated worker's lease) and read by everything that
// shows or acts on it.
type JobStatus struct {
	Job   Job
	State JobState
	// Code is why, for machines; Reason is why, in words, with numbers.
	Code   Code
	Reason string
	// Binding is the signal that limits the budget; zero when none does.
	Binding Binding
	// Rate is the job's allocated rate, batches per second.
	Rate float64
	// Holds are the holds that apply to the job, oldest first.
	Holds []hold.Hold
}

// HeldReason is the reason of a job that holds apply to: the one format
// of it, wherever the hold is applied.
func HeldReason(hs []hold.Hold) string { return "paused: " + describeHolds(hs) }

// Held is the status of job j while holds hs (at least one) apply to it:
// the one place a hold becomes a job's status, in the controller's
// decision and in a coordinated worker alike. A hold that could not be
// confirmed first (holds.UnconfirmedHoldID's source is unknown to this
// package) is the caller's to mark CodeUnavailable.
func Held(j Job, hs []hold.Hold) JobStatus {
	return JobStatus{Job: j, State: JobPaused, Code: CodeHeld, Reason: HeldReason(hs), Holds: hs}
}

// Scaled is the status st becomes under a ratio hold h: throttled, at
// h.Ratio of its rate, with h among its holds.
func Scaled(st JobStatus, h hold.Hold) JobStatus {
	st.State, st.Code, st.Reason = JobThrottled, CodeScaled, hold.ScaledReason(h, st.Reason)
	st.Rate *= h.Ratio
	st.Holds = append(slices.Clone(st.Holds), h)
	return st
}

// describeHolds is holds hs in words, one after the other.
func describeHolds(hs []hold.Hold) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("hold %s on %s by %s (%s): %s, until %s", h.ID, h.Scope, h.Actor, h.Source, h.Reason, h.Expires.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, "; ")
}

// SlowRate is the rate, in batches per second, under which a job (or one
// worker's share of it) waits more than a few seconds for each batch: it
// is shown as throttled, with [SlowReason], never as running.
const SlowRate = 0.2

// SlowReason is the reason of a job or worker held to rate, under
// SlowRate, by a decision whose reason is why.
func SlowReason(rate float64, why string) string {
	every := "never"
	if rate > 0 {
		every = "every " + time.Duration(float64(time.Second)/rate).Round(time.Second).String()
	}
	return fmt.Sprintf("throttled: %.2g batches/s, one batch %s (the budget: %s)", rate, every, why)
}

// Explainer is a pacer that can say why its job is held back: its status,
// typed (state, code, reason, binding signal, rate and holds). The pacers
// throttled hands out are Explainers; the jobs library and River's
// middleware read a pacer's status through it.
type Explainer interface {
	Status() JobStatus
}
