// Package throttle paces background jobs: it holds the pacing controller
// (pure logic that turns signal samples into per-job allocations), the
// per-job token buckets that enforce an allocation, and the pause gate
// that stops work while a hold applies.
//
// The pieces, from the inside out:
//
//   - [Gate]: a pause gate. Closed, every waiter blocks; opened, every
//     waiter wakes at once.
//   - [Limiter]: one job's token bucket (golang.org/x/time/rate) behind a
//     Gate, plus a cap on batches in flight. It applies an [Allocation]
//     and fails closed: a new Limiter, or one given a zero rate, lets no
//     work start.
//   - [LocalHolds]: the in-process set of pause holds, each with a [Scope], a
//     [Source], a reason and a mandatory expiry.
//
// Every time-dependent method has an explicit-time twin (AddAt,
// ReleaseAt, AllowAt, ApplyAt), so the logic is testable with fixed
// instants; blocking waits are tested inside testing/synctest bubbles.
package throttle
