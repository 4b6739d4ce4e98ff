// Package sim is a deterministic, seeded simulator of a PostgreSQL primary
// and its replica under foreground load and paced background work. The
// same [throttle.Controller] that runs in production drives it, beside
// baseline policies, and an oracle with perfect knowledge says how much
// background work was possible at each tick. `throttled sim` prints the
// comparison; tests assert its bars.
package sim

import "math"

// Plant constants: what one background batch costs the primary and the
// replica, the primary's connection limit, and the WAL and transaction IDs
// the foreground writes and spends.
const (
	cpuPerBatch   = 0.02           // core-seconds of CPU per batch
	walPerBatch   = 64 << 10       // bytes of WAL per batch, unless the scenario sets WALPerRow
	baseDuration  = 0.05           // seconds per batch on an idle primary
	usableConns   = 100.0          // client slots
	fgWALPerCore  = 1 << 20        // bytes of WAL per second per core of foreground work
	applyNormal   = 50 << 20       // bytes per second a healthy replica applies
	target        = 0.7            // primary_load target of every scenario
	critical      = 1.0            // primary_load critical level
	lagTarget     = 2.0            // replica_lag_seconds target
	maxBudget     = 400.0          // what the jobs could do unpaced, batches per second
	initBudget    = maxBudget / 10 // every policy's starting rate
	tickSeconds   = 1.0            // one decision per second
	smoothingTau  = 5.0            // seconds, as the sampler's EWMA
	noiseSigma    = 0.03           // relative measurement noise of primary_load
	rowsPerBatch  = 1000           // rows one batch cleans
	segmentBytes  = 16 << 20       // bytes of one WAL segment
	fgXIDsPerCore = 100            // transaction IDs per second per core of foreground work
)

// queue is the time-averaged number of sessions waiting for a CPU, per
// core, at utilisation u on c cores: Sakasegawa's approximation of an
// M/M/c queue, continued linearly past 0.97 so an oversubscribed primary
// reads ever higher instead of infinite.
func queue(u, c float64) float64 {
	k := math.Sqrt(2 * (c + 1))
	q := func(u float64) float64 { return math.Pow(u, k) / (c * (1 - u)) }
	if u <= 0 {
		return 0
	}
	if u < 0.97 {
		return q(u)
	}
	return q(0.97) + 30/c*(u-0.97)
}

// load is primary_load (sessions on or waiting for a CPU, per core) at
// utilisation u on c cores.
func load(u, c float64) float64 { return u + queue(u, c) }

// batchDuration is how long a batch takes at utilisation u: service time
// inflated by the wait for a CPU.
func batchDuration(u, c float64) float64 {
	if u <= 0 {
		return baseDuration
	}
	return baseDuration * (1 + queue(u, c)/u)
}

// utilisationAt is the utilisation at which load reaches level on c cores.
func utilisationAt(level, c float64) float64 {
	lo, hi := 0.0, 2.0
	for range 60 {
		mid := (lo + hi) / 2
		if load(mid, c) < level {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
