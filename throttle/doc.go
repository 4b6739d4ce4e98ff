// Package throttle is the pacing controller: pure logic that turns signal
// samples into per-job allocations. [Controller.Step] takes the time and a
// snapshot of the signals and returns a [Decision]: the mode, the budget,
// the signal that binds, and each job's allocation and status. It does no
// I/O and reads no clock.
//
// The words a decision is told in (a job's state, code and why, the
// binding signal, events) are package status's, shared by everything
// that shows or acts on a decision. The controller applies nothing
// itself: internal/pacing applies each decision to the jobs' limiters
// (limit.Limiter, package throttle/limit) in the process that decides,
// and internal/coord publishes it to a coordinated cluster's workers. The
// controller reads holds (package throttle/hold) through a [HoldSource].
//
// Every time-dependent method has an explicit-time twin (Step, and
// hold.Local's AddAt and ReleaseAt), so the logic is testable with fixed
// instants.
package throttle
