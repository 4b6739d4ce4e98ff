package pacing

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/throttled/throttled/status"
)

// LimitedTime keeps, per job, the seconds spent at each why: each
// observation of a job's why counts the time since the job's last one
// against the why observed then, capped at MaxInterval so a stalled loop
// does not swell one why. It is safe for concurrent use.
type LimitedTime struct {
	maxInterval time.Duration
	mu          sync.Mutex
	jobs        map[status.Job]*whyClock
}

type whyClock struct {
	last time.Time  // the last observation
	why  status.Why // observed then
	secs map[status.Why]float64
}

// NewLimitedTime returns an empty LimitedTime whose intervals count for at
// most maxInterval each (a few ticks); 0 means 3 s.
func NewLimitedTime(maxInterval time.Duration) *LimitedTime {
	return &LimitedTime{maxInterval: cmp.Or(maxInterval, 3*time.Second), jobs: map[status.Job]*whyClock{}}
}

// Observe records that job j is limited by w as of now; the time since its
// previous observation counts against the why observed then.
func (t *LimitedTime) Observe(now time.Time, j status.Job, w status.Why) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.jobs[j]
	if !ok {
		t.jobs[j] = &whyClock{last: now, why: w, secs: map[status.Why]float64{}}
		return
	}
	if dt := t.interval(c, now); dt > 0 {
		c.secs[c.why] += dt
	}
	if now.After(c.last) {
		c.last = now
	}
	c.why = w
}

// interval is the seconds since c's last observation that count, capped.
func (t *LimitedTime) interval(c *whyClock, now time.Time) float64 {
	return min(now.Sub(c.last), t.maxInterval).Seconds()
}

// Seconds is job j's seconds at each why until now (the interval since its
// last observation counted too, against the why observed then), nil for a
// job never observed. It never decreases from one call to a later one.
func (t *LimitedTime) Seconds(now time.Time, j status.Job) map[status.Why]float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.jobs[j]
	if !ok {
		return nil
	}
	out := maps.Clone(c.secs)
	if dt := t.interval(c, now); dt > 0 {
		out[c.why] += dt
	}
	return out
}

// Jobs lists the jobs observed, sorted.
func (t *LimitedTime) Jobs() []status.Job {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.jobs))
}
