package status

import (
	"slices"
)

// Code says, as one of a closed set, why a job (or the whole budget) runs
// as it does. It is for machines: the freno check's status code, the
// metrics' why label, the confirm page, the API and the CLI derive from
// it. The reason beside it is for people and is never parsed.
type Code string

// The codes, from a job running freely to one that may not run at all.
const (
	// CodeRunning: nothing holds the job back; the budget may grow.
	CodeRunning Code = "running"
	// CodeBinding: a signal near its target limits the budget's growth.
	CodeBinding Code = "binding"
	// CodeSlowStart: the budget doubles back after a pause or a cut, or a
	// job that joined a running controller doubles toward its share.
	CodeSlowStart Code = "slow_start"
	// CodeInherited: a new leader doubles back toward the budget the last
	// leader published.
	CodeInherited Code = "inherited"
	// CodeBreach: a breach of a target a short while ago limits the
	// budget: it grows back toward the budget that breached, or waits
	// for a calm before probing past it.
	CodeBreach Code = "breach_memory"
	// CodeMaxRate: the job, or the whole budget, is at its max_rate.
	CodeMaxRate Code = "max_rate"
	// CodeLowUtilization: the jobs use too little of the budget for more
	// to be measured; it does not grow.
	CodeLowUtilization Code = "low_utilization"
	// CodeNotGrowing: a signal is unknown or has no new sample; the
	// budget holds.
	CodeNotGrowing Code = "not_growing"
	// CodeHolding: a signal is near or over its target, or batches fail;
	// the budget holds, or waits for the last cut to take effect.
	CodeHolding Code = "holding"
	// CodeCut: a signal is over its target and the budget is being cut:
	// at this tick, by an emergency cut, or by the last cut still taking
	// effect.
	CodeCut Code = "cut"
	// CodeTooSlow: the job's rate is under SlowRate: a batch starts only
	// every few seconds.
	CodeTooSlow Code = "too_slow"
	// CodeScaled: a hold with a ratio (a live override) scales the job to
	// a share of the rate it would get.
	CodeScaled Code = "scaled"
	// CodeExempt: a hold exempts the job from the signal that pauses every
	// job (critical or stale); it goes on at the rate it had, and a
	// critical pause it runs through pages.
	CodeExempt Code = "exempt"
	// CodeHeld: a hold applies to the job.
	CodeHeld Code = "held"
	// CodeGated: a job rule that binds this job (a vacuum on a table it
	// writes, a custom signal it names) reads over its target or cannot be
	// read; the other jobs run.
	CodeGated Code = "gated"
	// CodeCritical: a signal reached its critical level; every job is
	// paused.
	CodeCritical Code = "critical"
	// CodeStale: a required signal is too old or unreadable; every job is
	// paused.
	CodeStale Code = "stale"
	// CodeWarmingUp: a required signal is still learning what normal is
	// (the foreground-latency canary's job-free baseline, about a second
	// at start); no job starts yet, and nothing is wrong: no event, no
	// page, and no slow start after it at start.
	CodeWarmingUp Code = "warming_up"
	// CodeUnavailable: the job has no valid allocation: no decision yet,
	// no leader, or a lease that lapsed.
	CodeUnavailable Code = "unavailable"
)

// Go reports whether a job with this code may start batches now (at its
// rate): false for the codes that pause it.
func (c Code) Go() bool {
	switch c {
	case CodeHeld, CodeGated, CodeCritical, CodeStale, CodeWarmingUp, CodeUnavailable:
		return false
	}
	return true
}

// CodeFor is the code a status read from elsewhere (a coordinated
// worker's lease) carries: c when it agrees with state s, else CodeOf(s).
// A leader of an older version writes the state and the reason but not
// the code, so a worker may hold a code from an earlier leader that no
// longer fits; the state decides then.
func CodeFor(s JobState, c Code) Code {
	fits := map[JobState][]Code{
		JobRunning:   {CodeRunning, CodeBinding, CodeSlowStart, CodeInherited, CodeBreach, CodeMaxRate, CodeLowUtilization, CodeNotGrowing, CodeHolding},
		JobThrottled: {CodeCut, CodeHolding, CodeNotGrowing, CodeTooSlow, CodeScaled, CodeExempt},
		JobPaused:    {CodeHeld, CodeGated, CodeCritical, CodeStale, CodeWarmingUp, CodeUnavailable, CodeTooSlow},
	}[s]
	if slices.Contains(fits, c) {
		return c
	}
	return CodeOf(s)
}

// CodeOf is the code a status without one is read as, by its state: a
// running job runs, a throttled one holds, and a paused one has no valid
// allocation (nothing says it is fine to go).
func CodeOf(s JobState) Code {
	switch s {
	case JobRunning:
		return CodeRunning
	case JobThrottled:
		return CodeHolding
	}
	return CodeUnavailable
}
