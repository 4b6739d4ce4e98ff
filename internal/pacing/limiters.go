package pacing

import (
	"context"
	"sync"
	"time"

	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/limit"
)

// ReasonNotRegistered is the pause reason of a limiter whose job the last
// decision did not include.
const ReasonNotRegistered = "job not registered with the controller"

// Limiters keeps one [limit.Limiter] per job and applies each
// [throttle.Decision] to them: a job the decision pauses (a hold, a
// critical or stale mode) is paused with the decision's reason; any other
// job gets its allocation.
// A limiter handed out before its job's first decision lets no work start.
// Limiters is safe for concurrent use.
type Limiters struct {
	now  func() time.Time
	mu   sync.Mutex
	m    map[status.Job]*limit.Limiter
	last throttle.Decision // the decision applied last
}

// NewLimiters returns an empty set. now nil means time.Now.
func NewLimiters(now func() time.Time) *Limiters {
	return &Limiters{now: now, m: map[status.Job]*limit.Limiter{}}
}

// Get returns j's limiter, creating it (closed) on first use.
func (ls *Limiters) Get(j status.Job) *limit.Limiter {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.m[j]
	if !ok {
		l = limit.New(string(j), ls.now)
		ls.m[j] = l
	}
	return l
}

// Apply applies d to every limiter. Limiters of jobs d does not mention
// are paused: work without a decision is work nobody allowed.
func (ls *Limiters) Apply(d throttle.Decision) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.last = d
	for j, jd := range d.Jobs {
		l, ok := ls.m[j]
		if !ok {
			l = limit.New(string(j), ls.now)
			ls.m[j] = l
		}
		l.Apply(jd.Allocation)
		if jd.State == status.JobPaused {
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

// Waited returns the jobs whose limiters had a caller waiting since the
// last call (see [limit.Limiter.Waited]).
func (ls *Limiters) Waited() []status.Job {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var out []status.Job
	for j, l := range ls.m {
		if l.Waited() {
			out = append(out, j)
		}
	}
	return out
}

// WorkedAt returns when a batch of any job was last at work in this
// process, as of t: t while one holds a slot, and the zero time if none
// ever ran (see [limit.Limiter.WorkedAt]).
func (ls *Limiters) WorkedAt(t time.Time) time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var last time.Time
	for _, l := range ls.m {
		if w := l.WorkedAt(t); w.After(last) {
			last = w
		}
	}
	return last
}

// PauseAll pauses every limiter with reason, until the next Apply.
func (ls *Limiters) PauseAll(reason string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.m {
		l.Pause(reason)
	}
}

// lastWith returns the last decision, and whether it includes job j.
func (ls *Limiters) lastWith(j status.Job) (throttle.Decision, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	_, ok := ls.last.Jobs[j]
	return ls.last, ok
}

// LimiterPacer is one job's pacer in a process that decides itself:
// permission from the job's [limit.Limiter], feedback to the
// [throttle.Controller]. It satisfies the jobs package's Pacer, Allower and
// Explainer interfaces.
type LimiterPacer struct {
	job status.Job
	l   *limit.Limiter
	ls  *Limiters
	c   *throttle.Controller
}

// Pacer returns job j's pacer, reporting to c.
func (ls *Limiters) Pacer(c *throttle.Controller, j status.Job) *LimiterPacer {
	return &LimiterPacer{job: j, l: ls.Get(j), ls: ls, c: c}
}

// Wait waits until j may start one batch (see [limit.Limiter.Wait]) and
// returns the function to call when the batch ends.
func (p *LimiterPacer) Wait(ctx context.Context) (func(rows int64, took time.Duration, err error), error) {
	g, err := p.l.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return p.done(g), nil
}

// Allow is Wait's non-blocking twin.
func (p *LimiterPacer) Allow() (func(rows int64, took time.Duration, err error), bool) {
	g, ok := p.l.Allow()
	if !ok {
		return nil, false
	}
	return p.done(g), true
}

// Take takes a token of j's limiter with no in-flight slot (see
// [limit.Limiter.Take]) for work this process never sees end, such as the
// chunk a freno client copies after its check, and reports it as one
// batch of no rows and no time: the job's use. It reports whether there
// was a token; a refusal counts as a wait, the job's demand.
func (p *LimiterPacer) Take() bool {
	if !p.l.Take() {
		return false
	}
	p.c.Report(p.job, throttle.Feedback{})
	return true
}

func (p *LimiterPacer) done(g limit.Grant) func(rows int64, took time.Duration, err error) {
	return g.Done(func(rows int64, took time.Duration, err error) {
		p.c.Report(p.job, throttle.Feedback{Rows: rows, Duration: took, Err: err})
	})
}

// ForegroundStretch reports the last decision's
// [throttle.Decision.Foreground] and its sample's time, and false when no
// foreground_latency rule is configured (or no decision was made yet). The jobs package shrinks
// batches while it is above 1: a batch that stretches the foreground is
// too big, however short it is itself.
func (p *LimiterPacer) ForegroundStretch() (stretch float64, at time.Time, ok bool) {
	d, ok := p.ls.lastWith(p.job)
	if !ok || d.ForegroundAt.IsZero() {
		return 0, time.Time{}, false
	}
	return d.Foreground, d.ForegroundAt, true
}

// Status is the job's part of the last decision, typed; before the first
// decision the job is paused, unavailable.
func (p *LimiterPacer) Status() status.JobStatus {
	d, ok := p.ls.lastWith(p.job)
	if !ok {
		return status.JobStatus{Job: p.job, State: status.JobPaused, Code: status.CodeUnavailable, Reason: "waiting for the controller's first decision"}
	}
	st, _ := d.Status(p.job)
	return st
}
