package throttle

import (
	"sync"
	"time"
)

// ReasonNotRegistered is the pause reason of a limiter whose job the last
// decision did not include.
const ReasonNotRegistered = "job not registered with the controller"

// Limiters keeps one [Limiter] per job and applies each [Decision] to
// them: a job the decision pauses (a hold, a critical or stale mode) is
// paused with the decision's reason; any other job gets its allocation.
// A limiter handed out before its job's first decision lets no work start.
// Limiters is safe for concurrent use.
type Limiters struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[Job]*Limiter
}

// NewLimiters returns an empty set. now nil means time.Now.
func NewLimiters(now func() time.Time) *Limiters {
	return &Limiters{now: now, m: map[Job]*Limiter{}}
}

// Get returns j's limiter, creating it (closed) on first use.
func (ls *Limiters) Get(j Job) *Limiter {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.m[j]
	if !ok {
		l = NewLimiter(j, ls.now)
		ls.m[j] = l
	}
	return l
}

// Apply applies d to every limiter. Limiters of jobs d does not mention
// are paused: work without a decision is work nobody allowed.
func (ls *Limiters) Apply(d Decision) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for j, jd := range d.Jobs {
		l, ok := ls.m[j]
		if !ok {
			l = NewLimiter(j, ls.now)
			ls.m[j] = l
		}
		l.Apply(jd.Allocation)
		if jd.State == JobPaused {
			l.Pause(jd.Reason)
		} else {
			l.Resume()
		}
	}
	for j, l := range ls.m {
		if _, ok := d.Jobs[j]; !ok {
			l.Pause(ReasonNotRegistered)
		}
	}
}
