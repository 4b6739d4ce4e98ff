// Package pacing applies the controller's decisions in the process that
// makes them: [Limiters] holds one limit.Limiter per job and applies each
// throttle.Decision to them, a [LimiterPacer] is one job's view of them
// (the pacer a solo throttled.Client hands out), and [LimitedTime] counts
// the seconds each job spends at each status.Why. A coordinated worker
// applies its leases through internal/coord instead; the controller
// itself (package throttle) applies nothing.
package pacing
