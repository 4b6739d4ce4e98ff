package throttle

import (
	"fmt"
	"math"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

type criticalPause struct {
	since      time.Time
	signal     status.Binding // the signal that began it
	value      float64
	threshold  float64
	valueKnown bool    // value and threshold are the reading that began it
	resumeAt   float64 // the first signal's level to stay past
	lowerWorse bool
	// members are every signal that reached its critical level during the
	// pause, with the level each must stay past (under, or over when
	// lowerIsWorse) to resume.
	members    map[string]resumeLevel
	quiet      time.Duration
	quietSince time.Time // zero while not quiet
	latched    bool
}

type resumeLevel struct {
	name       signals.Name // the member's signal, for exemptions
	at         float64
	lowerWorse bool
}

type pauseEpisode struct {
	mode   status.Mode
	budget float64 // budget before the pause, for slow start
	// startup: the pause began before any work was allowed (a signal
	// still warming up at start), so there is no earlier rate to come
	// back to slowly.
	startup bool
}

// inherit takes over a previous leader's critical pause: the rule that
// began it must go quiet for the quiet period (after a person resumes, if
// latched), and the slow start after it counts from the budget before it.
func (c *Controller) inherit(in CriticalState) {
	b := in.Signal
	rule, ok := c.cfg.Rules[b.Signal]
	if !ok || rule.Critical == 0 {
		// A rule since removed or relaxed: hold on primary_load's.
		b, rule = status.Binding{Signal: signals.PrimaryLoad}, c.cfg.Rules[signals.PrimaryLoad]
	}
	e := ruleEval{key: b.String(), name: b.Signal, labels: b.Labels, rule: rule}
	rl := e.resumeLevel(c.cfg.ResumeLevel)
	c.critical = &criticalPause{since: in.Since, signal: b, threshold: rule.Critical, resumeAt: rl.at, lowerWorse: rl.lowerWorse,
		members: map[string]resumeLevel{e.key: rl}, quiet: c.cfg.QuietPeriod, latched: in.Latched, quietSince: in.QuietSince}
	if b.Equal(in.Signal) && in.Threshold != 0 {
		c.critical.value, c.critical.threshold, c.critical.valueKnown = in.Value, in.Threshold, true
	}
	c.pause = &pauseEpisode{mode: status.ModeCritical, budget: in.Budget}
}

// Critical returns the critical pause the controller is in, for a leader
// to publish, or nil.
func (c *Controller) Critical() *CriticalState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.critical == nil {
		return nil
	}
	st := &CriticalState{Signal: c.critical.signal, Since: c.critical.since, Latched: c.critical.latched, QuietSince: c.critical.quietSince}
	if c.critical.valueKnown {
		st.Value, st.Threshold = c.critical.value, c.critical.threshold
	}
	if c.pause != nil {
		st.Budget = c.pause.budget
	}
	return st
}

// Resume ends a latched critical pause on a person's word. Work then
// resumes as soon as the signal is under its resume level, without the
// quiet period, at SlowStart of the budget before the pause. It reports
// whether there was a latch to end.
func (c *Controller) Resume(now time.Time, actor string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.critical == nil || !c.critical.latched {
		return false
	}
	c.critical.latched = false
	c.critical.quiet = 0
	c.prev.Events = append(c.prev.Events, status.Event{Kind: status.EventResumed, At: now, Signal: c.critical.signal.String(),
		Message: fmt.Sprintf("latched critical pause on %s resumed by %s", c.critical.signal, actor)})
	return true
}

// trackCritical counts consecutive new samples at or past each critical
// level, starts a critical pause when a count reaches the window (or adds
// the signal to a pause under way, with a page of its own), and ends a
// pause after its quiet period.
func (c *Controller) trackCritical(now time.Time, evals []ruleEval, d *Decision) {
	for _, e := range evals {
		if e.rule.Critical == 0 || e.unknown != "" {
			continue
		}
		oc := c.overCritical[e.key]
		if oc == nil {
			oc = &overCount{}
			c.overCritical[e.key] = oc
		}
		if !e.at.After(oc.lastAt) {
			continue // the same sample again counts once
		}
		if !oc.lastAt.IsZero() && e.at.Sub(oc.lastAt) > e.rule.MaxAge {
			oc.n = 0 // a gap breaks the run: these samples are not consecutive
		}
		oc.lastAt = e.at
		if !e.pastCritical() {
			oc.n = 0
			continue
		}
		if oc.n == 0 {
			oc.firstBudget = c.budget
		}
		oc.n++
		if oc.n < c.cfg.CriticalWindow {
			continue
		}
		if c.critical == nil {
			c.startCritical(now, e, oc.firstBudget, d)
		} else if _, ok := c.critical.members[e.key]; !ok {
			c.critical.members[e.key] = e.resumeLevel(c.cfg.ResumeLevel)
			d.Events = append(d.Events, status.Event{Kind: status.EventCritical, At: now, Signal: e.key, Value: e.raw, Threshold: e.rule.Critical,
				Message: fmt.Sprintf("critical: %s at %.3g, at or past %.3g for %d samples, during a critical pause on %s",
					e.key, e.raw, e.rule.Critical, c.cfg.CriticalWindow, c.critical.signal)})
		}
	}
	if c.critical != nil {
		c.checkQuiet(now, evals, d)
	}
}

// pastCritical reports whether the raw reading is at or past the rule's
// critical level.
func (e ruleEval) pastCritical() bool {
	if lowerIsWorse(e.name) {
		return e.raw <= e.rule.Critical
	}
	return e.raw >= e.rule.Critical
}

// resumeLevel is the level the signal must stay past to end a critical
// pause: a fraction of the critical level, or for a level to stay over,
// the critical level divided by it.
func (e ruleEval) resumeLevel(fraction float64) resumeLevel {
	if lowerIsWorse(e.name) {
		return resumeLevel{name: e.name, at: e.rule.Critical / fraction, lowerWorse: true}
	}
	return resumeLevel{name: e.name, at: e.rule.Critical * fraction}
}

func (r resumeLevel) quiet(e ruleEval) bool {
	if r.lowerWorse {
		return e.raw > r.at && e.value > r.at
	}
	return e.raw < r.at && e.value < r.at
}

func (c *Controller) startCritical(now time.Time, e ruleEval, budgetBefore float64, d *Decision) {
	kept := c.criticals[:0]
	for _, t := range c.criticals {
		if now.Sub(t) < c.cfg.LatchWindow {
			kept = append(kept, t)
		}
	}
	c.criticals = append(kept, now)
	// The quiet period doubles with each earlier critical pause in the
	// window, saturating rather than overflowing.
	quiet := c.cfg.QuietPeriod
	for range len(c.criticals) - 1 {
		if quiet > math.MaxInt64/2 {
			break
		}
		quiet *= 2
	}
	rl := e.resumeLevel(c.cfg.ResumeLevel)
	c.critical = &criticalPause{
		since: now, signal: e.binding(), value: e.raw, threshold: e.rule.Critical, valueKnown: true, resumeAt: rl.at,
		lowerWorse: lowerIsWorse(e.name), members: map[string]resumeLevel{e.key: rl}, quiet: quiet,
		latched: len(c.criticals) >= c.cfg.LatchAfter,
	}
	// Slow start restarts from the budget before the breach began, not
	// from what the cuts on the way left.
	if c.pause == nil || c.pause.mode != status.ModeCritical {
		c.pause = &pauseEpisode{mode: status.ModeCritical, budget: budgetBefore}
	}
	kind, msg := status.EventCritical, fmt.Sprintf("critical: %s at %.3g, at or past %.3g for %d samples; all jobs paused",
		e.key, e.raw, e.rule.Critical, c.cfg.CriticalWindow)
	if c.critical.latched {
		kind = status.EventLatched
		msg += fmt.Sprintf("; %d critical pauses within %s: latched until a person resumes", len(c.criticals), c.cfg.LatchWindow)
	}
	d.Events = append(d.Events, status.Event{Kind: kind, At: now, Signal: e.key, Value: e.raw, Threshold: e.rule.Critical,
		Jobs: c.runningJobs(), Message: msg})
}

// checkQuiet ends the critical pause once every signal that went critical
// during it has stayed under its resume level for the quiet period, and
// no other signal is at its critical level.
func (c *Controller) checkQuiet(now time.Time, evals []ruleEval, d *Decision) {
	cp := c.critical
	quiet := map[string]bool{}
	calm := true
	for _, e := range evals {
		if rl, ok := cp.members[e.key]; ok {
			quiet[e.key] = e.unknown == "" && rl.quiet(e)
		} else if e.rule.Critical > 0 && e.unknown == "" && e.pastCritical() {
			calm = false
		}
	}
	for key := range cp.members {
		calm = calm && quiet[key]
	}
	if !calm {
		cp.quietSince = time.Time{}
		return
	}
	if cp.quietSince.IsZero() {
		cp.quietSince = now
	}
	if cp.latched || now.Sub(cp.quietSince) < cp.quiet {
		return
	}
	d.Events = append(d.Events, status.Event{Kind: status.EventRecovered, At: now, Signal: cp.signal.String(), Threshold: cp.resumeAt,
		Message: fmt.Sprintf("recovered: %s under %.3g for %s; work resumes at %.0f%% of the rate before the pause",
			cp.signal, cp.resumeAt, now.Sub(cp.quietSince).Round(time.Second), 100*c.cfg.SlowStart)})
	for key := range cp.members {
		if oc := c.overCritical[key]; oc != nil {
			oc.n = 0
		}
	}
	c.critical = nil
}

func (c *Controller) criticalReason(now time.Time) string {
	cp := c.critical
	rel := "under"
	if cp.lowerWorse {
		rel = "over"
	}
	reached := fmt.Sprintf("%s reached %.3g (critical %.3g)", cp.signal, cp.value, cp.threshold)
	if !cp.valueKnown {
		// Taken over from a leader that did not publish the reading.
		reached = fmt.Sprintf("%s at or past its critical %.3g (the reading that began it, under the previous leader, is unknown)", cp.signal, cp.threshold)
	}
	if cp.latched {
		if len(c.criticals) == 0 {
			return fmt.Sprintf("critical: %s; latched: resume by hand", reached)
		}
		return fmt.Sprintf("critical: %s; latched after %d critical pauses within %s: resume by hand",
			reached, len(c.criticals), c.cfg.LatchWindow)
	}
	wait := "waiting for it to go " + rel + fmt.Sprintf(" %.3g", cp.resumeAt)
	if !cp.quietSince.IsZero() {
		wait = fmt.Sprintf("%s %.3g for %s, %s to go", rel, cp.resumeAt, now.Sub(cp.quietSince).Round(time.Second), (cp.quiet - now.Sub(cp.quietSince)).Round(time.Second))
	}
	return fmt.Sprintf("critical: %s; all jobs paused; %s", reached, wait)
}

// enterPause records the start of a pause episode and reports whether
// this mode is new.
func (c *Controller) enterPause(m status.Mode) bool {
	if c.pause == nil {
		c.pause = &pauseEpisode{mode: m, budget: c.budget, startup: !c.worked}
		if m == status.ModeCritical || m == status.ModePaused || c.worked && m != status.ModeThrottled {
			// The start's slow start ends with any pause but a warm-up
			// or a stale spell before work began.
			c.starting = false
		}
		return true
	}
	if c.pause.mode != m {
		c.pause.mode = m
		return true
	}
	return false
}

// leavePause ends a pause episode: slow start from the budget before it,
// which also becomes the ceiling that growth approaches carefully.
func (c *Controller) leavePause(now time.Time, d *Decision) {
	before := c.pause.budget
	switch c.pause.mode {
	case status.ModeStale:
		d.Events = append(d.Events, status.Event{Kind: status.EventFresh, At: now, Message: "every required signal is fresh again"})
	case status.ModePaused:
		d.Events = append(d.Events, status.Event{Kind: status.EventUnpaused, At: now, Message: "holds released"})
	}
	// A critical pause is a breach at the budget it began at; a stale
	// signal or a hold says nothing against the budget before it. One that
	// began with the budget cut to its floor was someone else's load: the
	// jobs double back toward the budget the breach before it began at, as
	// after any cut, not from the floor.
	if c.pause.mode == status.ModeCritical {
		if before <= 2*c.cfg.MinBudget && c.ceiling > before && now.Sub(c.ceilingAt) < c.cfg.BreachMemory {
			before = c.ceiling
		}
		c.rememberBreach(before, now)
		c.lastOverAt = now // the calm before probing past it starts now
	}
	if c.pause.mode == status.ModeThrottled || c.pause.startup && c.pause.mode == status.ModeStale {
		// A warm-up (a required signal still learning its normal) says
		// nothing against the budget before it, and a stale spell before
		// any work ran has no rate to come back to slowly: go on where a
		// controller with every signal ready would have been.
		c.pause = nil
		return
	}
	c.pause, c.inherited = nil, 0
	c.budget = c.clamp(before * c.cfg.SlowStart)
	c.ssthresh = before
	c.changedAt, c.cutAt = now, now
	c.overTarget, c.rawOver = false, 0
}
