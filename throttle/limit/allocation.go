package limit

import (
	"math"

	"golang.org/x/time/rate"
)

// Allocation is what the controller grants one job: how fast it may start
// batches and how many may run at once. The zero value grants nothing.
type Allocation struct {
	// Rate is the number of batches (tokens) per second the job may start.
	// 0 means the job must not start work; +Inf means no rate limit (the
	// in-flight cap still applies). Negative and NaN mean 0.
	Rate float64
	// Burst is the token bucket's depth: how many batches may start back
	// to back after the job was idle. At least 1 when Rate > 0 (a smaller
	// value is raised to 1).
	Burst int
	// MaxInFlight is how many batches may run at once. 0 (or negative)
	// means no work.
	MaxInFlight int
}

// runs reports whether a lets the job start any work.
func (a Allocation) runs() bool { return a.Rate > 0 && a.MaxInFlight > 0 }

// normalized returns a with out-of-range fields clamped, so that equal
// grants compare equal and the bucket never gets a burst below 1.
func (a Allocation) normalized() Allocation {
	if !(a.Rate > 0) { // also NaN
		a.Rate = 0
	}
	a.MaxInFlight = max(a.MaxInFlight, 0)
	a.Burst = max(a.Burst, 0)
	if a.Rate > 0 {
		a.Burst = max(a.Burst, 1)
	}
	return a
}

// limit converts Rate for rate.Limiter.
func (a Allocation) limit() rate.Limit {
	if math.IsInf(a.Rate, 1) {
		return rate.Inf
	}
	return rate.Limit(a.Rate)
}
