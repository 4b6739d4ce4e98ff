package throttle

import (
	"math"
	"time"

	"github.com/throttled/throttled/status"
)

type errTick struct {
	at              time.Time
	batches, errors int
}

// Report records one batch attempt of job j (a retry is an attempt like
// any other). Reports for unknown jobs are ignored.
func (c *Controller) Report(j status.Job, f Feedback) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.jobs[j]
	if !ok {
		return
	}
	s.batches++
	s.duration += f.Duration
	if f.Err != nil {
		s.errors++
	}
}

// ReportMany records n batch attempts of job j at once, errs of them
// failed, taking took in all: what a remote worker's heartbeat carries.
func (c *Controller) ReportMany(j status.Job, n, errs int, took time.Duration) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.jobs[j]
	if !ok {
		return
	}
	s.batches += n
	s.errors += min(errs, n)
	s.duration += took
}

// Wanted records that a caller of job j waited for its limiter since the
// last step (see [limit.Limiter.Waited]): the job wants more than its rate.
// While it has run too little to show use (under two batches in the
// usage window) such a job is starved, not idle, and its whole rate counts
// as used, so a budget its jobs cannot start a batch on (a share of a few
// workers under a cut, each waiting minutes for its first token) grows
// back instead of being lent away or held as unused. A job that shows use
// is measured as before: it is idle when it uses under half its rate, and
// growth waits for its use to catch up. Calls for unknown jobs are
// ignored.
func (c *Controller) Wanted(j status.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.jobs[j]; ok {
		s.waiting = true
	}
}

// updateUsage folds the reports since the last step into each job's usage
// and the error window, and returns the batches and errors in the window.
func (c *Controller) updateUsage(now time.Time, dt time.Duration) (batches, errs int) {
	alpha := 1 - math.Exp(-float64(dt)/float64(usageTau))
	tick := errTick{at: now}
	for _, s := range c.jobs {
		inst := float64(s.batches) / dt.Seconds()
		// Idle means using under half of a positive rate for several
		// ticks, not the quiet right after a pause, and only at a rate
		// that could show use: under two batches in the usage window, a
		// job waiting for its next token is not idle.
		s.wanted, s.waiting = s.waiting, false
		now := s.wanted || s.batches > 0
		s.busy, s.busyBefore = now || s.busyBefore, now
		switch {
		case s.starved():
			s.idle = 0
		case s.idle >= idleTicks:
			// Idle, its share lent: it stays so until it uses what it
			// still gets.
			if s.batches > 0 && inst >= 0.5*s.rate {
				s.idle = 0
			}
		case s.rate > 0 && s.rate*usageTau.Seconds() >= 2 && inst < 0.5*s.rate:
			s.idle++
		default:
			s.idle = 0
		}
		if !s.seen && s.batches > 0 {
			s.usage = inst
		} else {
			s.usage += alpha * (inst - s.usage)
		}
		if s.batches > 0 {
			avg := s.duration / time.Duration(s.batches)
			if !s.seen {
				s.avgDur = avg
			} else {
				s.avgDur += time.Duration(alpha * float64(avg-s.avgDur))
			}
			s.seen = true
		}
		tick.batches += s.batches
		tick.errors += s.errors
		s.batches, s.errors, s.duration = 0, 0, 0
	}
	c.errWindow = append(c.errWindow, tick)
	// Keep up to ten windows, so a slow job's errors still add up to
	// MinErrorBatches.
	cut := 0
	for cut < len(c.errWindow) && now.Sub(c.errWindow[cut].at) >= 10*c.cfg.ErrorWindow {
		cut++
	}
	c.errWindow = c.errWindow[cut:]
	// Newest first: the last ErrorWindow, extended further back while it
	// holds fewer than MinErrorBatches batches.
	for i := len(c.errWindow) - 1; i >= 0; i-- {
		t := c.errWindow[i]
		if now.Sub(t.at) >= c.cfg.ErrorWindow && batches >= c.cfg.MinErrorBatches {
			break
		}
		batches += t.batches
		errs += t.errors
	}
	return batches, errs
}

// usageTau is the time constant of each job's smoothed usage.
const usageTau = 5 * time.Second

// idleTicks is how many ticks of under-use make a job idle, its unused
// share lent to the others.
const idleTicks = 3
