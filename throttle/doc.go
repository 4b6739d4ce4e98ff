// Package throttle paces background jobs: it holds the pacing controller
// (pure logic that turns signal samples into per-job allocations) and the
// glue that applies a decision to the jobs' limiters.
//
// The pieces, from the inside out:
//
//   - limit.Limiter (package throttle/limit): one job's token bucket
//     behind a pause gate, the hot path. [Limiters] applies each
//     [Decision]'s allocations to them, and a [Pacer] is one job's view,
//     which satisfies jobs.Pacer.
//   - package throttle/hold: the hold model. A [hold.Hold] has a
//     [hold.Scope], a [hold.Source], a reason and a mandatory expiry;
//     [hold.Local] is the in-process set of them. The controller reads
//     holds through a [HoldSource].
//   - [Controller]: a snapshot and the time in, a [Decision] out.
//
// Every time-dependent method has an explicit-time twin (Step, and
// hold.Local's AddAt and ReleaseAt), so the logic is testable with fixed
// instants; blocking waits are tested inside testing/synctest bubbles.
package throttle
