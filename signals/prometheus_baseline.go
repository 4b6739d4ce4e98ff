package signals

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// A Prometheus signal's job-free baseline reuses the canary's idea
// (foreground_latency.go): the reading is compared with its level while no
// job was at work, so the ratio is what the jobs add, and a surge of users
// moves both. Where it differs, and why:
//
//   - Delay. The canary knows which probe saw a job at work as it commits,
//     50 ms after. A Prometheus reading covers its rate() window, and its
//     data are a scrape interval old: a reading is job-free only when no
//     job session was seen at work (primary_job_sessions, every tick of
//     the primary's sampler) for the signal's Delay before its data. So a
//     baseline needs a rest of Delay (tens of seconds), not half a second.
//   - Window. The canary's last baseline stands in for a minute; here it
//     stands in for BaselineWindow (10 minutes by default), or the rests
//     would cost the jobs half their time. Past it the ratio is unknown
//     (ErrWarmingUp) and a required rule holds the jobs for the rest.
//   - Level. The baseline is the median of the job-free readings of the
//     last minute, not their mean: one stall of the foreground with no job
//     at work (every request waiting 0.4 s on a checkpoint) lifts the
//     readings whose rate() window holds it, a quarter of the minute's at
//     a 15 s window, and a mean of them stood in at 30-40 times the true
//     level for the next ten minutes, so no rule could bind. The median
//     moves only once the stall holds half the minute's readings.
//   - Floor. A reading of 0 or less is no baseline: a ratio over it says
//     nothing. A signal whose job-free level is 0 (an error rate) wants
//     Baseline none and an absolute target.
//   - Sessions and more. Beside primary_job_sessions (sampled every
//     250 ms, where a remote worker's own application_name hides it and
//     a short batch can fall between two ticks), a reading is at work
//     when Config.Work says so: this process's batches in flight and
//     ended, the sidecar's tokens out, the batches workers report to a
//     leader. A failed round, a gap longer than MaxAge between rounds and
//     the time before the Poller last started are at work too: a time
//     nobody watched is never job-free (Poller.watchJobs).
type appBaseline struct {
	value  float64 // the median of recent; 0 before the first
	at     time.Time
	recent []timedValue
}

type timedValue struct {
	at time.Time
	v  float64
}

// baselineSpan is how far back the job-free readings a baseline averages
// go.
const baselineSpan = time.Minute

// observe records a reading v of data at at, job-free or not.
func (b *appBaseline) observe(v float64, at time.Time, jobFree bool) {
	if !jobFree || !(v > 0) || math.IsInf(v, 0) {
		return
	}
	b.recent = append(b.recent, timedValue{at: at, v: v})
	keep := b.recent[:0]
	for _, x := range b.recent {
		if at.Sub(x.at) <= baselineSpan {
			keep = append(keep, x)
		}
	}
	b.recent = keep
	vs := make([]float64, len(keep))
	for i, x := range keep {
		vs[i] = x.v
	}
	b.value, b.at = median(vs), at
}

// median is the middle of vs (the mean of the middle two for an even
// count), which it sorts; 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// ratio is v over the baseline at at, or ErrWarmingUp while there is no
// baseline, or it is older than window.
func (b *appBaseline) ratio(v float64, at time.Time, window, delay time.Duration) (float64, error) {
	switch {
	case b.at.IsZero():
		return 0, fmt.Errorf("%w: no job-free baseline yet: it needs a reading (over 0) with no job at work for the delay %s before its data", ErrWarmingUp, delay)
	case at.Sub(b.at) > window:
		return 0, fmt.Errorf("%w: the job-free baseline is %s old, over the baseline window %s: it needs a rest of %s with no job at work", ErrWarmingUp, at.Sub(b.at).Round(time.Second), window, delay)
	}
	return v / b.value, nil
}
