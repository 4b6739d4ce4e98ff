// Package limit is the hot path of pacing: one job's [Limiter], a token
// bucket (golang.org/x/time/rate) behind a pause [Gate], plus a cap on
// batches in flight. A Limiter applies an [Allocation] and fails closed:
// a new Limiter, or one given a zero rate, lets no work start. Each
// [Grant] holds one in-flight slot until the batch releases it.
//
// It knows nothing of signals, holds or the controller: package throttle
// turns decisions into allocations and applies them here.
package limit
