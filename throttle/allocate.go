package throttle

import (
	"fmt"
	"math"
	"time"

	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
	"github.com/throttled/throttled/throttle/limit"
)

// holds asks the hold source which holds apply to each job: those that
// pause it, the ratio hold that scales it (the smallest ratio), the
// exemptions it has, and whether every job (or, with none registered, all
// jobs) is paused.
func (c *Controller) holds(now time.Time) (map[status.Job][]hold.Hold, map[status.Job]hold.Hold, map[status.Job][]hold.Hold, bool) {
	out, scaled := map[status.Job][]hold.Hold{}, map[status.Job]hold.Hold{}
	var exempt map[status.Job][]hold.Hold // nil without exemptions: the common step allocates nothing for them
	if c.cfg.Holds == nil {
		return out, scaled, exempt, false
	}
	all := true
	for _, j := range c.order {
		hs := c.cfg.Holds.Applying(now, string(j))
		if p := hold.Pausing(hs); len(p) > 0 {
			out[j] = p
			continue
		}
		all = false
		if _, by := hold.Scale(hs); by != nil && !c.cfg.ScaleAtWorkers {
			scaled[j] = *by
		}
		for _, h := range hs {
			if h.Exempt != "" {
				if exempt == nil {
					exempt = map[status.Job][]hold.Hold{}
				}
				exempt[j] = append(exempt[j], h)
			}
		}
	}
	if len(c.order) == 0 {
		h := hold.Pausing(c.cfg.Holds.Applying(now, ""))
		out[""] = h
		all = len(h) > 0
	}
	return out, scaled, exempt, all
}

// exemptions are the jobs' exemption holds, and the signals behind the
// critical or stale pause they may let a job run through (none while no
// such pause is in force).
type exemptions struct {
	holds map[status.Job][]hold.Hold
	from  []string
}

// covers returns the hold that exempts j from the pause: one of j's
// exemptions names each signal behind it.
func (e exemptions) covers(j status.Job) (hold.Hold, bool) {
	hs := e.holds[j]
	if len(e.from) == 0 || len(hs) == 0 {
		return hold.Hold{}, false
	}
	for _, name := range e.from {
		if !hold.Exempts(hs, name) {
			return hold.Hold{}, false
		}
	}
	for _, h := range hs {
		if h.Exempt == e.from[0] {
			return h, true
		}
	}
	return hold.Hold{}, false
}

func (c *Controller) anyJob() status.Job {
	if len(c.order) == 0 {
		return ""
	}
	return c.order[0]
}

// runningJobs lists the jobs that had a positive rate at the last step.
func (c *Controller) runningJobs() []status.JobRate {
	var out []status.JobRate
	for _, j := range c.order {
		if r := c.jobs[j].rate; r > 0 {
			out = append(out, status.JobRate{Job: j, Rate: r})
		}
	}
	return out
}

// allocate shares budget between the jobs that no hold applies to. A
// job's ramp (back from a hold, or its own slow start) caps its share;
// grow is the factor the slow starts grow by at this step (startGrowth).
func (c *Controller) allocate(now time.Time, budget float64, mode status.Mode, code status.Code, reason string, holds map[status.Job][]hold.Hold, scaled map[status.Job]hold.Hold, gated map[status.Job][]gate, ex exemptions, grow float64) map[status.Job]JobDecision {
	out := make(map[status.Job]JobDecision, len(c.order))
	var free []status.Job
	var claims []claim
	ramps := false // some free job ramps, or starts its ramp at this step
	for _, j := range c.order {
		s := c.jobs[j]
		if hs := holds[j]; len(hs) > 0 {
			if !s.held {
				s.held, s.heldRate = true, s.rate
			}
			st := status.Held(j, hs)
			out[j] = JobDecision{State: st.State, Code: st.Code, Reason: st.Reason, Holds: st.Holds}
			s.rate = 0
			continue
		}
		if h, ok := ex.covers(j); ok {
			// Exempt from what pauses every job: on at the rate it had,
			// never growing (the budget that would grow it is paused).
			r := min(s.cfg.MaxRate, max(s.goRate, s.cfg.MinRate, c.cfg.MinBudget))
			s.rate = r
			out[j] = JobDecision{Allocation: allocation(r, s.avgDur, c.cfg.Tick), State: status.JobThrottled, Code: status.CodeExempt,
				Reason: hold.ExemptReason(h, reason), Holds: []hold.Hold{h}}
			continue
		}
		if gs := gated[j]; len(gs) > 0 && code.Go() {
			// A critical or stale pause names itself; a gate shuts a job
			// that would otherwise run.
			if !s.held {
				s.held, s.heldRate = true, s.rate
			}
			out[j] = JobDecision{State: status.JobPaused, Code: status.CodeGated, Reason: gatedReason(gs)}
			s.rate = 0
			continue
		}
		if s.held {
			// Released: ramp back from a fraction of the rate before. A
			// job held since it joined has no rate before: its first
			// share starts its slow start instead.
			s.held = false
			if !s.joining {
				s.rampCap, s.startRamp = max(c.cfg.MinBudget, s.heldRate*c.cfg.SlowStart), false
			}
		}
		if s.startRamp && s.rampBound && s.busy && budget > 0 {
			// Its slow start held it under its share, and it used what
			// it got: grow as the budget's slow start would.
			s.rampCap *= grow
		}
		want := math.Inf(1)
		if s.idle >= idleTicks {
			want = s.usage*1.5 + c.cfg.MinBudget // idle: lend the rest
		}
		ramps = ramps || s.rampCap > 0 || s.joining
		free = append(free, j)
		claims = append(claims, claim{weight: s.cfg.Weight, floor: s.cfg.MinRate, cap: min(s.cfg.MaxRate, want)})
	}
	// Each job's share without its ramp, then with it: the ramp is
	// reckoned against the share, and what it holds back goes to the
	// others.
	shares := share(budget, claims)
	rates := shares
	if ramps {
		for i, j := range free {
			s := c.jobs[j]
			if s.joining && shares[i] > 0 {
				// Its first share: a job that joins a running controller
				// starts at SlowStart of it, as a controller starts at a
				// fraction of its most, never with its whole share at once.
				s.joining, s.rampCap, s.startRamp = false, c.cfg.SlowStart*shares[i], true
			}
			if s.rampCap > 0 {
				claims[i].cap = min(claims[i].cap, s.rampCap)
			}
		}
		rates = share(budget, claims)
	}
	for i, j := range free {
		s := c.jobs[j]
		r := rates[i]
		switch {
		case s.rampCap == 0 || budget <= 0:
		case s.startRamp:
			// It ends once its share fits under it; an idle job keeps it,
			// its share lent, until it runs again.
			s.rampBound = shares[i] > s.rampCap
			if !s.rampBound && s.idle < idleTicks {
				s.rampCap, s.startRamp = 0, false
			}
		case r < s.rampCap*0.99:
			s.rampCap = 0 // the ramp no longer binds
		default:
			s.rampCap *= c.cfg.MaxGrowth
		}
		h, scale := scaled[j]
		if scale {
			r *= h.Ratio // a live override: the share is the job's, the rest unused
		}
		s.rate = r
		if r > 0 && (mode == status.ModeRunning || mode == status.ModeThrottled) {
			s.goRate = r
		}
		jd := JobDecision{Allocation: allocation(r, s.avgDur, c.cfg.Tick), State: status.JobRunning, Code: code}
		switch {
		case r == 0:
			jd.State, jd.Reason = status.JobPaused, reason
			if code.Go() {
				jd.Code = status.CodeTooSlow // no share of the budget, though nothing pauses it
			}
		case r < status.SlowRate:
			jd.State, jd.Code, jd.Reason = status.JobThrottled, status.CodeTooSlow, status.SlowReason(r, reason)
		case mode == status.ModeThrottled:
			jd.State, jd.Reason = status.JobThrottled, reason
		case s.startRamp && s.rampBound:
			jd.Code, jd.Reason = status.CodeSlowStart, fmt.Sprintf("slow start: joined at %.3g/s, growing toward its share of %.3g/s", r, shares[i])
		case r >= s.cfg.MaxRate:
			jd.Code, jd.Reason = status.CodeMaxRate, fmt.Sprintf("running: at the job's max_rate %.3g/s", s.cfg.MaxRate)
		}
		if scale && r > 0 {
			before := jd.Reason
			if before == "" {
				before = reason
			}
			jd.State, jd.Code, jd.Reason, jd.Holds = status.JobThrottled, status.CodeScaled, hold.ScaledReason(h, before), []hold.Hold{h}
		}
		out[j] = jd
	}
	return out
}

// allocation turns a rate into a token bucket: a burst of one tick's
// tokens (at least 1) and an in-flight cap by Little's law with 50 %
// headroom (at least 1).
func allocation(rate float64, avgDur, tick time.Duration) limit.Allocation {
	if rate <= 0 {
		return limit.Allocation{}
	}
	inflight := 1
	if avgDur > 0 {
		inflight = max(1, int(math.Ceil(rate*avgDur.Seconds()*1.5)))
	}
	return limit.Allocation{Rate: rate, Burst: max(1, int(math.Ceil(rate*tick.Seconds()))), MaxInFlight: inflight}
}
