package signals

import (
	"math"
	"time"
)

// ewma is an exponentially weighted moving average over irregularly
// spaced readings: a reading dt after the previous one moves the average
// by 1-exp(-dt/tau) of the difference, so the smoothing is the same
// whatever the sampling interval. A gap much longer than tau lets the new
// reading replace the average. The zero value is empty.
type ewma struct {
	tau   time.Duration
	value float64
	at    time.Time
	set   bool
}

func (e *ewma) add(x float64, at time.Time) float64 {
	if !e.set || e.tau <= 0 {
		e.value, e.at, e.set = x, at, true
		return x
	}
	dt := at.Sub(e.at)
	if dt <= 0 {
		return e.value
	}
	alpha := 1 - math.Exp(-float64(dt)/float64(e.tau))
	e.value += alpha * (x - e.value)
	e.at = at
	return e.value
}
