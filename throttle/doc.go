// Package throttle paces background jobs: it holds the pacing controller
// (pure logic that turns signal samples into per-job allocations), the
// hold model, and the glue that applies a decision to the jobs' limiters.
//
// The pieces, from the inside out:
//
//   - limit.Limiter (package throttle/limit): one job's token bucket
//     behind a pause gate, the hot path. [Limiters] applies each
//     [Decision]'s allocations to them, and a [Pacer] is one job's view,
//     which satisfies jobs.Pacer.
//   - [LocalHolds]: the in-process set of pause holds, each with a [Scope], a
//     [Source], a reason and a mandatory expiry.
//   - [Controller]: a snapshot and the time in, a [Decision] out.
//
// Every time-dependent method has an explicit-time twin (AddAt,
// ReleaseAt, Step), so the logic is testable with fixed instants;
// blocking waits are tested inside testing/synctest bubbles.
package throttle
