// Package hold is the hold model: a [Hold] stops (or scales, or exempts
// from one signal) the jobs in its [Scope] until it expires. It holds the
// one rule every hold is checked by ([Request.Check], [TTLPolicy],
// [Storable]), the in-process set of holds ([Local]), and the run and
// maintenance windows that the controller applies as holds ([Windows]).
// The cluster's durable holds live in package holds, which checks them by
// the same rule.
//
// It names a job as a string, as package throttle/limit does;
// status.Job is the controller's validated name. It knows nothing of
// signals or the controller: package throttle reads holds through its
// HoldSource interface, which [Local] and [Windows] satisfy.
//
// Every time-dependent method has an explicit-time twin (AddAt,
// ReleaseAt, Applying), so the logic is testable with fixed instants.
package hold
