package throttle

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/throttled/throttled/status"
)

// readings are what one step saw, for control.
type readings struct {
	worst       ruleEval // the usable rule with the highest pressure
	rawWorst    ruleEval // the new sample with the highest raw pressure
	rising      ruleEval // an integrating signal that rose at each of its last samples
	maxRaw      float64  // highest raw pressure of any usable sample, one Resolution step lower
	maxRawFresh float64  // the same over samples new at this step
	anyFresh    bool
	batches     int // batch attempts in the error window
	errors      int
}

// control is the ordinary step: cut over target, hold in the deadband,
// grow under it.
func (c *Controller) control(now time.Time, r readings, frozen bool, d *Decision) {
	pSig, binding := r.worst.pressure, r.worst.binding()
	errFrac, errPressure := c.errorPressure(r)
	errorsBind := errPressure > 1 && errPressure > pSig
	p := pSig
	if errorsBind {
		p, binding = min(errPressure, c.cfg.EmergencyPressure*0.99), status.Binding{Signal: status.BindingErrors}
	}
	d.Binding, d.Pressure = binding, p
	if binding.IsZero() {
		d.Mode, d.Code, d.Reason = status.ModeThrottled, status.CodeNotGrowing, "throttled: no rule has a usable signal; not growing"
		return
	}
	c.countReadings(r)
	signalOver := pSig > 1 || c.rawOver >= 2
	over := signalOver || errPressure > 1
	if over && !c.overTarget {
		c.breachBegins(now, r, pSig)
		c.breachAt = now
	}
	c.overTarget = over
	if over {
		c.lastOverAt = now
	}
	floor := c.errorCutFloor(errPressure, signalOver)
	describe := fmt.Sprintf("%s at %.2f of target", binding, p)
	switch {
	case errorsBind:
		describe = fmt.Sprintf("%.0f%% of %d batches failed (limit %.0f%%)", 100*errFrac, r.batches, 100*c.cfg.MaxErrorFraction)
	case pSig <= 1 && c.rawOver >= 2 && r.rawWorst.key != "":
		// Over on raw samples alone: name the signal whose samples they
		// are, not the one with the highest smoothed pressure.
		binding = r.rawWorst.binding()
		describe = fmt.Sprintf("%s samples over target twice in a row (now %.2f of target; smoothed %.2f)",
			binding, r.rawWorst.rawPress, r.rawWorst.pressure)
	}
	d.Binding = binding
	emergency, evidence, eBinding := c.emergency(now, r, pSig)
	if emergency != "" {
		d.Binding = eBinding
	}
	tick := c.cfg.Tick
	// The smoothed reading is over target, but every new raw sample reads
	// under it and this breach was cut already: the smoothing lags the
	// cut, and a cut now answers a cause that is gone. Hold until a new
	// sample says otherwise. In the replay's idle scenario the canary's raw
	// readings were back under target a tick after a 75 % emergency cut,
	// and its smoothed reading, over target ten seconds more, cut the
	// budget from 100 to 0.2 batches/s.
	lagging := !errorsBind && pSig > 1 && r.anyFresh && r.maxRawFresh <= 1 && !c.cutAt.IsZero() && !c.cutAt.Before(c.breachAt)
	switch {
	case emergency != "":
		// Evidence of an emergency is evidence of a breach: the breach
		// began (and was remembered) above, with over.
		c.cut(now, 1-c.cfg.EmergencyCut, p, 0)
		c.emergencyAt = evidence
		// The next emergency needs readings taken after this cut.
		c.trail = c.trail[:0]
		d.Mode, d.Code, d.Reason = status.ModeThrottled, status.CodeCut, fmt.Sprintf("throttled: emergency cut by %.0f%%: %s", 100*c.cfg.EmergencyCut, emergency)
	case over && !lagging && (now.Sub(c.cutAt) >= 2*tick-tick/2 || p > c.cutPressure):
		// By the pressure's square, not in proportion: a queue's wait
		// grows faster than its load, so a cut to 1/p left the signal
		// over target at the next reading, and one reading is no longer
		// an emergency. In the simulator's flapping scenario the
		// proportional cut spent 77 s over target, the square 25 s.
		q := max(p, r.maxRawFresh)
		f := max(1-c.cfg.MaxCut, min(0.95, 1/(q*q)))
		c.cut(now, f, p, floor)
		d.Mode, d.Code, d.Reason = status.ModeThrottled, status.CodeCut, fmt.Sprintf("throttled: cut by %.0f%%: %s", 100*(1-f), describe)
	case over && lagging:
		d.Mode, d.Code, d.Reason = status.ModeThrottled, status.CodeCut, "throttled: "+describe+", smoothed; new samples under target: letting the last cut take effect"
	case over:
		d.Mode, d.Code, d.Reason = status.ModeThrottled, status.CodeCut, "throttled: "+describe+"; letting the last cut take effect"
	case max(pSig, r.maxRaw) >= c.cfg.GrowBelow:
		d.Mode, d.Code, d.Reason = status.ModeThrottled, status.CodeHolding, "throttled: "+describe+"; holding"
	case errFrac > c.cfg.MaxErrorFraction:
		d.Mode, d.Code, d.Reason = status.ModeThrottled, status.CodeHolding, fmt.Sprintf("throttled: %s; holding: %d of the last %d batches failed", describe, r.errors, r.batches)
	default:
		c.underTarget(now, r, pSig, frozen, d)
	}
}

// errorPressure is the share of the window's batches that failed, and
// that share over MaxErrorFraction: 0 with too few batches to judge
// (MinErrorBatches), when failures only stop growth.
func (c *Controller) errorPressure(r readings) (errFrac, errPressure float64) {
	if r.batches > 0 {
		errFrac = float64(r.errors) / float64(r.batches)
	}
	if r.batches >= c.cfg.MinErrorBatches {
		errPressure = errFrac / c.cfg.MaxErrorFraction
	}
	return errFrac, errPressure
}

// countReadings counts new readings over target in a row, and keeps the
// trail of new readings at the emergency level. Over target means the
// smoothed pressure says so, or two new raw samples in a row do (the
// smoothing would otherwise delay the cut by seconds). A sample seen
// before is not a second reading.
func (c *Controller) countReadings(r readings) {
	if !r.anyFresh {
		return
	}
	if r.maxRawFresh > 1 {
		c.rawOver++
	} else {
		c.rawOver = 0
	}
	// Readings in a row at the emergency level are evidence when even
	// one Resolution step lower each is over target.
	if r.rawWorst.rawPress >= c.cfg.EmergencyPressure && r.rawWorst.oneStepLower() > 1 {
		c.trail = append(c.trail, r.rawWorst.rawPress)
		if n := c.cfg.EmergencyReadings; len(c.trail) > n {
			c.trail = c.trail[len(c.trail)-n:]
		}
	} else {
		c.trail = c.trail[:0]
	}
}

// breachBegins remembers the budget a new breach began at. A breach that
// begins before the budget has grown since the last cut is the last one
// going on: the budget it began at is the cut's, not a rate that
// breached, and remembering it would ratchet the ceiling down with every
// cut.
func (c *Controller) breachBegins(now time.Time, r readings, pSig float64) {
	grewSinceCut := c.changedAt.After(c.cutAt)
	settle := 2 * time.Duration(c.cfg.GrowEvery) * c.cfg.Tick
	switch {
	case c.ceiling == 0 || now.Sub(c.ceilingAt) >= c.cfg.BreachMemory || grewSinceCut && c.budget < c.ceiling || c.budget > c.ceiling:
		c.rememberBreach(c.budget, now)
	case now.Sub(c.cutAt) < settle:
		// Over again within moments of the cut, before any growth: the
		// cut is still taking effect, and this is the breach that was;
		// the ceiling stays the budget that breached.
		c.ceilingAt = now
	default:
		// Over again at a budget that held since the cut: the cut was
		// not enough. Split the difference between the budget that
		// breached and this one, so a pressure that stays teaches the
		// ceiling within a few breaches while no cut becomes the ceiling
		// outright.
		c.ceiling, c.ceilingAt = math.Sqrt(c.ceiling*c.budget), now
	}
	c.ceilingLag = integrates(r.worst.name) && pSig > 1 || integrates(r.rawWorst.name) && c.rawOver >= 2
}

// errorCutFloor is the least a cut may leave. Errors alone never cut
// below a quarter of the budget they began at: when they do not depend on
// the rate, cutting further buys nothing. A signal over target cuts as
// far as it must.
func (c *Controller) errorCutFloor(errPressure float64, signalOver bool) float64 {
	switch {
	case errPressure <= 1:
		c.errorFloor = 0
	case !signalOver:
		if c.errorFloor == 0 {
			c.errorFloor = c.budget * c.cfg.SlowStart
		}
		return c.errorFloor
	}
	return 0
}

// emergency returns the evidence of an emergency, in words, with the
// reading that gave it and the signal; "" for none. An emergency
// needs evidence that the pressure is real and sustained, never one
// reading: EmergencyReadings new readings in a row at the level (each
// over target even one Resolution step lower: one session fewer on few
// cores), or the smoothed pressure at the level with as many readings in
// a row over target.
func (c *Controller) emergency(now time.Time, r readings, pSig float64) (emergency string, evidence float64, binding status.Binding) {
	need := c.cfg.EmergencyReadings
	switch {
	case len(c.trail) >= need && r.rawWorst.key != "":
		emergency = fmt.Sprintf("%s at %.2f of target or more at %d readings in a row (%s of target; smoothed %.2f)",
			r.rawWorst.key, c.cfg.EmergencyPressure, need, formatTrail(c.trail), r.rawWorst.pressure)
		evidence, binding = r.rawWorst.rawPress, r.rawWorst.binding()
	case pSig >= c.cfg.EmergencyPressure && c.rawOver >= need:
		emergency = fmt.Sprintf("%s at %.2f of target, smoothed, and over target at %d readings in a row", r.worst.key, pSig, c.rawOver)
		evidence, binding = pSig, r.worst.binding()
	}
	// Replica lag integrates the excess of WAL over what the replica
	// applies: a cut shows in it only as the backlog drains, seconds
	// later. So an emergency cut on lag is repeated at the next tick only
	// on evidence of more pressure than the last one's; three cuts of
	// EmergencyCut in a row on a lag already falling left 1/64 of the
	// budget. (Load answers a cut within a tick: its cuts repeat.)
	tick := c.cfg.Tick
	if emergency != "" && integrates(binding.Signal) && now.Sub(c.cutAt) < 2*tick-tick/2 && evidence <= c.emergencyAt {
		return "", 0, status.Binding{}
	}
	return emergency, evidence, binding
}

// underTarget grows the budget, or holds it while an integrating signal
// rises. The signal is named only when it is what limits the budget;
// otherwise the reason says what does.
func (c *Controller) underTarget(now time.Time, r readings, pSig float64, frozen bool, d *Decision) {
	var limit string
	var code status.Code
	if r.rising.key != "" {
		// A budget past what the replica applies shows first as lag
		// rising at every sample, long before the lag reaches its target:
		// growing further would only make the cut later and deeper.
		limit, code = fmt.Sprintf("%s rising, at %.2f of target; budget %.3g/s held", r.rising.key, r.rising.rawPress, c.budget), status.CodeBinding
		d.Binding = r.rising.binding()
	} else {
		limit, code = c.grow(now, max(pSig, r.maxRaw), r.worst.key, frozen)
	}
	d.Mode, d.Code, d.Reason = status.ModeRunning, code, "running: "+limit
	if code != status.CodeBinding {
		d.Binding = status.Binding{}
	}
}

// cut multiplies the budget by factor, not below floor. It ends the
// start's slow start.
func (c *Controller) cut(now time.Time, factor, p, floor float64) {
	c.budget = c.clamp(max(c.budget*factor, min(floor, c.budget)))
	c.changedAt, c.cutAt, c.cutPressure, c.emergencyAt = now, now, p, 0
	c.starting = false
}

// formatTrail lists raw pressures as "1.52, 1.61".
func formatTrail(ps []float64) string {
	var b []byte
	for i, p := range ps {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%.2f", p)
	}
	return string(b)
}

// rememberBreach records budget as the one a breach began at, which caps
// growth for BreachMemory. A breach that began within one doubling of
// MinBudget is forgotten instead: the least budget cannot have caused it
// (the load is someone else's), and remembering it would hold the jobs
// near the floor, probing by ProbeGrowth, for BreachMemory after the load
// is gone.
func (c *Controller) rememberBreach(budget float64, now time.Time) {
	if budget <= 2*c.cfg.MinBudget {
		c.ceiling, c.ceilingAt = 0, time.Time{}
		return
	}
	c.ceiling, c.ceilingAt = budget, now
}

// Growth after a breach comes back at once to breachSafe of the budget the
// breach began at, breachSafeLag for a breach of replica lag; past that it
// only probes, after a calm.
const (
	breachSafe    = 0.9
	breachSafeLag = 0.8
)

// grow raises the budget toward the pressure at which it would reach
// GrowBelow, and returns what limits the budget now and whether that is
// the signal key (pressure p). Far under target (p under half of
// GrowBelow) it doubles each step: after a pause up to half the budget
// before it, after a breach up to 90 % of the budget the breach began at,
// so a cut is undone within seconds once the pressure is gone. Nearer the
// target it grows by at most MaxGrowth, tapering; near the budget of the
// last breach it only probes, and only with clear room: twice the
// deadband below GrowBelow.
func (c *Controller) grow(now time.Time, p float64, key string, frozen bool) (limit string, code status.Code) {
	b := fmt.Sprintf("budget %.3g/s", c.budget)
	if c.budget >= c.cfg.MaxBudget {
		return fmt.Sprintf("%s, the most allowed (max_rate)", b), status.CodeMaxRate
	}
	if frozen {
		return b + " held", status.CodeNotGrowing
	}
	// Use is measured over about 5 s; a budget of under two batches in
	// that time cannot show it, and a job that waits that long for its
	// next token is not idle.
	if u := c.utilization(p < c.cfg.GrowBelow/2); u < c.cfg.MinUtilization && c.budget*usageTau.Seconds() >= 2 {
		return fmt.Sprintf("low utilization: %s; not growing: jobs use %.0f%% of the budget", b, 100*u), status.CodeLowUtilization
	}
	room := c.cfg.GrowBelow / max(p, 1e-3)
	f := min(c.cfg.MaxGrowth, room)
	limit, code = fmt.Sprintf("%s, growing by up to %.0f%% every %s", b, 100*(c.cfg.MaxGrowth-1), time.Duration(c.cfg.GrowEvery)*c.cfg.Tick), status.CodeRunning
	if room < c.cfg.MaxGrowth {
		limit, code = fmt.Sprintf("%s at %.2f of target; %s, growing as it allows", key, p, b), status.CodeBinding
	}
	roomy := p < c.cfg.GrowBelow/2
	fast := false // doubling: the step may come sooner than GrowEvery
	switch {
	case c.starting && roomy:
		// Slow start, as TCP's, from the start: with plenty of room,
		// double each step toward the most allowed. A cleanup on a quiet
		// primary reaches its max_rate in seconds, not minutes.
		f, fast = min(2, room), true
		limit, code = fmt.Sprintf("slow start: %s, doubling toward %.3g/s, the most allowed", b, c.cfg.MaxBudget), status.CodeSlowStart
	case c.budget < c.ssthresh/2 && roomy:
		// Slow start, as TCP's: after a pause, far under the budget before
		// it and with plenty of room, double each step up to half of it.
		f, fast = min(2, room, c.ssthresh/2/c.budget), true
		limit, code = fmt.Sprintf("slow start: %s, doubling back toward %.3g/s, the budget before the pause", b, c.ssthresh), status.CodeSlowStart
		if c.inherited > 0 {
			limit, code = fmt.Sprintf("inherited budget: %s, doubling back toward %.3g/s, the last leader's", b, c.inherited), status.CodeInherited
		}
	}
	if now.Sub(c.ceilingAt) < c.cfg.BreachMemory && c.ceiling > 0 {
		safe := breachSafe * c.ceiling
		if c.ceilingLag {
			// Lag integrates: by the time it breached, the budget had been
			// over what the replica applies for a while, so the rate it
			// breached at is further from a safe one than a load breach's.
			safe = breachSafeLag * c.ceiling
		}
		calm := now.Sub(c.lastOverAt)
		switch {
		case c.budget < safe:
			if roomy {
				// After a cut, with the pressure under target: double back
				// toward the breach's budget as far as the room allows,
				// rather than creep. What cut it is gone, or the room
				// says how much of it is left.
				f, fast = max(f, min(2, room)), true
			}
			f = min(f, safe/c.budget)
			if code != status.CodeBinding {
				code = status.CodeBreach
				limit = fmt.Sprintf("%s, growing back toward %.3g/s, under the %.3g/s of a breach %s ago", b, safe, c.ceiling, now.Sub(c.ceilingAt).Round(time.Second))
			}
		case p < c.cfg.GrowBelow-(1-c.cfg.GrowBelow) && calm >= c.cfg.ProbeAfter:
			f = min(f, c.cfg.ProbeGrowth)
			limit, code = fmt.Sprintf("%s, probing by %.0f%% past the %.3g/s of a breach %s ago", b, 100*(c.cfg.ProbeGrowth-1), c.ceiling, now.Sub(c.ceilingAt).Round(time.Second)), status.CodeBreach
		default:
			if code != status.CodeBinding {
				code = status.CodeBreach
				limit = fmt.Sprintf("%s, near the %.3g/s of a breach %s ago; probing past it after %s calm (%s so far)", b, c.ceiling, now.Sub(c.ceilingAt).Round(time.Second), c.cfg.ProbeAfter, calm.Round(time.Second))
			}
			return limit, code
		}
	}
	every := time.Duration(c.cfg.GrowEvery) * c.cfg.Tick
	switch {
	case fast && p < c.cfg.GrowBelow/4:
		// Very far under target, a doubling a tick, as TCP's slow start
		// doubles a round trip: the next reading, a tick on, still has
		// room for twice the rate. A cleanup of 25 s on an idle primary
		// lost 5 s to a doubling every two ticks.
		every = c.cfg.Tick
	case fast:
		// Nearer, doubling waits two ticks: one for the new rate to run,
		// one for the signals to show it.
		every = min(every, 2*c.cfg.Tick)
	}
	if f <= 1 || now.Sub(c.changedAt) < every-c.cfg.Tick/2 {
		return limit, code
	}
	c.budget = c.clamp(c.budget * f)
	c.changedAt = now
	if c.budget >= c.ssthresh {
		c.inherited = 0
	}
	if c.budget >= c.cfg.MaxBudget {
		c.starting = false
	}
	// The reason names the budget this step decided, as the decision's
	// Budget field does: "budget 0.0625/s, growing" beside a field of
	// 0.0727 read as two budgets.
	return strings.Replace(limit, b, fmt.Sprintf("budget %.3g/s", c.budget), 1), code
}

// startGrowth is the factor by which a job's own slow start (a job that
// joined a running controller) grows at this step, for a step after one
// at which it held the job under its share and the job used what it got.
// It grows as the budget's slow start from the start does, so a job that
// joins a leader ramps as the same job alone would: doubling every tick
// very far under target (under a quarter of GrowBelow), every two ticks
// far under it (by √2 a tick), and nearer the target, in the deadband
// or while an integrating signal rises by MaxGrowth a tick, as the ramp
// back from a hold does: there it only shares out a budget the signals
// hold. Over target, and while growth is frozen (a signal unknown or
// without a new sample), it holds.
func (c *Controller) startGrowth(d Decision, r readings, t tickEvals) float64 {
	if (d.Mode != status.ModeRunning && d.Mode != status.ModeThrottled) || d.Code == status.CodeWarmingUp || c.overTarget ||
		len(t.unknownOpt) > 0 || t.missed || r.worst.key == "" {
		return 1
	}
	if d.Mode == status.ModeRunning && r.rising.key == "" {
		switch p := max(r.worst.pressure, r.maxRaw); {
		case p < c.cfg.GrowBelow/4:
			return 2
		case p < c.cfg.GrowBelow/2:
			return math.Sqrt2
		}
	}
	return c.cfg.MaxGrowth
}

// utilization is the share of the budget the jobs use. A starved job
// counts its whole rate; with roomy (every signal far under target) so
// does any job that waited for its limiter since the last step: the
// limiter, not the job, is what holds it back, and a smoothed use would
// lag each doubling of slow start by seconds. In the start's slow start a
// job that ran a batch or waited at this step or the one before counts so
// too: a remote worker's report reaches the leader a heartbeat late, and
// each tick held for it cost a cleanup on an idle primary a second.
func (c *Controller) utilization(roomy bool) float64 {
	var used float64
	for _, s := range c.jobs {
		if s.starved() || roomy && (s.wanted || c.starting && s.busy) {
			// It would use all it gets. A job that shows use is
			// measured, so growth still waits for use to catch up.
			used += max(s.usage, s.rate)
			continue
		}
		used += s.usage
	}
	return used / c.budget
}

func (c *Controller) clamp(b float64) float64 {
	return min(c.cfg.MaxBudget, max(c.cfg.MinBudget, b))
}
