package throttle

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// Controller turns snapshots of signals into a background budget and a
// per-job allocation. It is pure logic: [Controller.Step] takes the time
// and a snapshot and returns a [Decision]; it does no I/O and reads no
// clock, so the same code runs in production and in the simulator.
//
// The rules, in order of precedence:
//
//   - Critical: a signal at or past its critical level for CriticalWindow
//     consecutive samples pauses every job (budget 0) and raises a page.
//     Work resumes only after the signal has stayed under its resume level
//     for a quiet period that doubles with each critical pause in the last
//     LatchWindow; the LatchAfter-th such pause latches until a person
//     calls Resume.
//   - Stale: a required signal older than its MaxAge, or unreadable, sets
//     the budget to 0. Unknown is unsafe, never "fine".
//   - Paused: a hold applies to every job.
//   - Otherwise the worst pressure (value over target) binds. Above 1 the
//     budget is cut at once, by at most MaxCut a step, or by EmergencyCut
//     on evidence that the pressure is real and sustained: never one
//     reading, but EmergencyReadings new readings in a row at
//     EmergencyPressure, or the smoothed pressure there with as many
//     readings over target. Under GrowBelow, with every signal fresh and
//     the jobs using most of their budget, it grows at most every
//     GrowEvery ticks by at most MaxGrowth, tapering as pressure nears
//     GrowBelow. Far under target it doubles every two ticks (every tick
//     under a quarter of GrowBelow), like TCP's
//     slow start: from the start toward MaxBudget, after a pause up to
//     half the budget before it, after a cut back to 90 % of the budget
//     that breached. Past that it only probes, by ProbeGrowth, after
//     ProbeAfter of calm. A breach remembers the budget it began at, not
//     a cut's: over target again within moments of a cut is the same
//     breach. Between GrowBelow and 1 it holds. Over target means the
//     smoothed pressure over 1, or two raw samples in a row over 1.
//   - After any pause (critical, stale, a hold) work restarts at SlowStart
//     of the budget before it, never at the old rate.
//   - A job that joins a running controller (registered once a step has
//     given any job a rate: a new worker's job at a leader, a job whose
//     workers all left and came back) starts at SlowStart of its share,
//     and its cap grows as the budget's slow start does while it uses
//     what it gets (see startGrowth); what the cap holds back goes to
//     the other jobs. A job registered at the controller's start has the
//     budget's own slow start, and no second one.
//
// A Controller is safe for concurrent use: jobs Report while a loop Steps.
type Controller struct {
	cfg Config

	mu    sync.Mutex
	jobs  map[status.Job]*jobState
	order []status.Job
	// allotted: a step has given a job a positive rate. The controller's
	// own start is over: a job registered from now on joins it running,
	// and starts at SlowStart of its share (see jobState.joining).
	allotted bool

	lastStep time.Time
	lastAt   map[string]time.Time // last sample time seen, per rule key
	trends   map[string]trend     // integrating signals' recent direction, by rule key
	prev     Decision

	growth        // the budget and how it grows
	breach        // over target: cuts, the breach's memory, emergencies
	criticalState // critical pauses and the latch
	pauseState    // any pause: what it began at, and the slow start after it
	errWindow     []errTick
}

// growth is the budget and what its growth goes by.
type growth struct {
	budget    float64   // kept through pauses; the output is 0 while paused
	changedAt time.Time // when the budget last changed
	starting  bool      // slow start from the start: doubling toward MaxBudget until a cut or a pause
	ssthresh  float64   // slow-start threshold: the budget before the last pause
	inherited float64   // a previous leader's budget, while growing back toward it
	tookOver  bool      // inherited, and no ordinary step yet
}

// breach is the state of being over target: the last cut, the readings
// that make an emergency, and the budget the last breach began at, which
// caps growth for BreachMemory.
type breach struct {
	cutAt       time.Time // when the budget was last cut
	breachAt    time.Time // when the last breach began
	cutPressure float64   // pressure at the last cut
	overTarget  bool      // the last tick was over target
	rawOver     int       // consecutive ticks with a raw sample over target
	emergencyAt float64   // the pressure that gave the last emergency cut its evidence
	trail       []float64 // the raw pressures of the last readings in a row at EmergencyPressure (at most EmergencyReadings), newest last
	ceiling     float64   // budget at which the last breach began
	ceilingAt   time.Time
	ceilingLag  bool      // the last breach was replica lag's
	lastOverAt  time.Time // the last step over target
	errorFloor  float64   // while errors bind: the least their cuts leave
}

// criticalState is the critical pause: the runs of samples at critical,
// the pause itself, and the starts of recent ones for the latch.
type criticalState struct {
	overCritical map[string]*overCount
	critical     *criticalPause
	criticals    []time.Time // starts of critical pauses, for the latch
}

// pauseState is any pause (critical, stale, held, warming up).
type pauseState struct {
	pause  *pauseEpisode
	worked bool // an ordinary step has allowed work at least once
}

// starved reports whether the job waited for its limiter at the last step
// but has run too little to show use (under two batches in the usage
// window): it is not idle, and its whole rate counts as used.
func (s *jobState) starved() bool { return s.wanted && s.usage*usageTau.Seconds() < 2 }

type jobState struct {
	cfg      JobConfig
	batches  int // since the last step
	errors   int
	duration time.Duration
	usage    float64 // tokens per second, smoothed
	idle     int     // consecutive ticks using under half its rate
	waiting  bool    // a caller waited for the limiter since the last step
	wanted   bool    // waiting, as of this step
	// busy: the job ran a batch or waited for its limiter at this step
	// or the one before (a remote worker's report reaches the leader a
	// heartbeat late, so one step may miss it)
	busy, busyBefore bool
	avgDur           time.Duration // smoothed batch duration
	seen             bool          // any report ever
	rate             float64       // last allocated rate
	held             bool
	heldRate         float64 // rate when the hold began
	// rampCap caps the rate while it ramps: back from a hold, or at the
	// job's start (startRamp); 0 for none.
	rampCap float64
	// startRamp: rampCap is the job's own slow start, from SlowStart of
	// its share, growing as the budget's slow start does; rampBound, the
	// cap held the job under its share at the last step.
	startRamp, rampBound bool
	// joining: registered with a running controller (allotted), and no
	// share yet; its first share starts its slow start. A job registered
	// at the controller's start is not slowed twice: the budget's own
	// slow start is its.
	joining bool
	goRate  float64 // the last rate a running or throttled budget gave it
	// exemptPaged: the page that the job runs through this critical pause
	// under an exemption was sent.
	exemptPaged bool
	// gates maps a gate's key to the time it opens again, after its
	// signal last read over target.
	gates map[string]time.Time
}

type overCount struct {
	n           int
	lastAt      time.Time
	firstBudget float64 // budget when the run of samples began
}

// New validates cfg, fills its defaults and returns a Controller at
// cfg.InitialBudget with no jobs.
func New(cfg Config) (*Controller, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:           cfg,
		jobs:          map[status.Job]*jobState{},
		lastAt:        map[string]time.Time{},
		trends:        map[string]trend{},
		growth:        growth{budget: cfg.InitialBudget, starting: true},
		criticalState: criticalState{overCritical: map[string]*overCount{}},
	}
	if prev := min(cfg.PreviousBudget, cfg.MaxBudget); prev > 0 {
		// Cautious after a failover, but never below what a new client
		// starts at (or the previous budget, if lower): a leader that
		// took over a moment ago and published its quarter must not make
		// the next one start at a quarter of that. The first step raises
		// a budget under InitialBudget when the primary is healthy.
		c.budget = c.clamp(max(prev*cfg.SlowStart, min(prev, cfg.InitialBudget)))
		c.ssthresh, c.inherited, c.tookOver, c.starting = prev, prev, true, false
	}
	if in := cfg.Inherited; in != nil {
		c.inherit(*in)
	}
	return c, nil
}

// Reconfigure replaces the configuration (rules, budgets, periods) and
// keeps the state: a critical pause, latched or not, the jobs, the
// budget and what it learned. A configuration New would refuse changes
// nothing.
func (c *Controller) Reconfigure(cfg Config) error {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg
	c.budget = c.clamp(c.budget)
	return nil
}

// Config returns the controller's configuration with defaults filled in.
func (c *Controller) Config() Config { return c.cfg }

// Register adds a job, or updates the weight and rates of one already
// registered. A job added once the controller has given any job a rate
// joins it running: its first share starts at SlowStart of that share.
func (c *Controller) Register(j JobConfig) error {
	if err := j.validate(); err != nil {
		return err
	}
	if j.Weight == 0 {
		j.Weight = 1
	}
	if j.MaxRate == 0 {
		j.MaxRate = math.Inf(1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range j.Signals {
		if _, ok := c.cfg.JobRules[n]; !ok {
			return fmt.Errorf("throttle: job %q: Signals names %q, which has no job rule (JobRules: %v)", j.Name, n, slices.Sorted(maps.Keys(c.cfg.JobRules)))
		}
	}
	if s, ok := c.jobs[j.Name]; ok {
		s.cfg = j
		return nil
	}
	c.jobs[j.Name] = &jobState{cfg: j, joining: c.allotted}
	c.order = append(c.order, j.Name)
	return nil
}

// Unregister removes a job; unknown names are ignored.
func (c *Controller) Unregister(j status.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, j)
	c.order = slices.DeleteFunc(c.order, func(x status.Job) bool { return x == j })
}

// Registered reports whether j is registered.
func (c *Controller) Registered(j status.Job) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.jobs[j]
	return ok
}

// Step decides the budget and allocations at now from snap.
func (c *Controller) Step(now time.Time, snap signals.Snapshot) Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	dt := c.advance(now)
	d := Decision{At: now, Events: c.prev.Events}
	c.prev.Events = nil
	batches, errs := c.updateUsage(now, dt)
	evals := c.evaluate(now, snap)
	t := c.classify(evals)
	r, healthy := c.readings(evals, t)
	r.batches, r.errors = batches, errs
	foreground(now, evals, &d)
	c.trackCritical(now, evals, &d)
	holds, scaled, exempt, allHeld := c.holds(now)
	pausedBy := c.decide(now, t, r, healthy && errs == 0, allHeld, holds, &d)
	if (d.Mode == status.ModeRunning || d.Mode == status.ModeThrottled) && d.Code != status.CodeWarmingUp {
		d.Budget = c.budget
	}
	d.Jobs = c.allocate(now, d.Budget, d.Mode, d.Code, d.Reason, holds, scaled, c.gated(now, snap, exempt), exemptions{holds: exempt, from: pausedBy}, c.startGrowth(d, r, t))
	c.pageExemptWhileCritical(now, &d)
	for _, jd := range d.Jobs {
		c.allotted = c.allotted || jd.Rate > 0
	}
	c.prev = d
	c.prev.Events = nil
	return d
}

// advance records a step at now and returns the time since the last one
// (a Tick for the first).
func (c *Controller) advance(now time.Time) time.Duration {
	dt := c.cfg.Tick
	if !c.lastStep.IsZero() && now.After(c.lastStep) {
		dt = now.Sub(c.lastStep)
	}
	c.lastStep = now
	if c.changedAt.IsZero() {
		// The first budget runs for a while before it may grow.
		c.changedAt = now
	}
	return dt
}

// tickEvals sorts a step's rule evaluations by what they allow.
type tickEvals struct {
	staleReq, warmingReq, unknownOpt []ruleEval
	missed                           bool // a required rule has no new sample: growth freezes
}

// classify marks which samples are new since the last step and sorts out
// the unknown ones. A sample seen at an earlier step counts once: it is
// not a second reading.
func (c *Controller) classify(evals []ruleEval) tickEvals {
	var t tickEvals
	for i := range evals {
		e := &evals[i]
		if e.unknown != "" {
			switch {
			case e.required && e.warming:
				t.warmingReq = append(t.warmingReq, *e)
			case e.required:
				t.staleReq = append(t.staleReq, *e)
			default:
				t.unknownOpt = append(t.unknownOpt, *e)
			}
			continue
		}
		last := c.lastAt[e.key]
		e.fresh = last.IsZero() || e.at.After(last)
		if e.fresh {
			c.lastAt[e.key] = e.at
		} else if e.required {
			t.missed = true // no new sample this tick: freeze growth
		}
	}
	return t
}

// readings gathers what the ordinary step works from: the worst pressure, the
// worst new raw sample, a rising integrator, and whether every signal is
// known, new and far under target (healthy).
func (c *Controller) readings(evals []ruleEval, t tickEvals) (r readings, healthy bool) {
	healthy = len(t.staleReq) == 0 && len(t.warmingReq) == 0 && len(t.unknownOpt) == 0 && !t.missed
	for _, e := range evals {
		if e.unknown != "" {
			continue
		}
		if r.worst.key == "" || e.pressure > r.worst.pressure {
			r.worst = e
		}
		// A raw sample counts one Resolution step lower: on 2 cores the
		// job's own session and one foreground statement read 1.0 (1.43
		// of target) at any budget, twice in a row often enough.
		r.maxRaw = max(r.maxRaw, e.oneStepLower())
		healthy = healthy && max(e.pressure, e.rawPress) < c.cfg.GrowBelow/2
		if !e.fresh {
			continue
		}
		r.maxRawFresh, r.anyFresh = max(r.maxRawFresh, e.oneStepLower()), true
		if r.rawWorst.key == "" || e.rawPress > r.rawWorst.rawPress {
			r.rawWorst = e
		}
		if integrates(e.name) && c.rising(e) && (r.rising.key == "" || e.rawPress > r.rising.rawPress) {
			r.rising = e
		}
	}
	return r, healthy
}

// foreground puts the foreground-latency canary's pressure in d (1, at
// now, when it is unknown).
func foreground(now time.Time, evals []ruleEval, d *Decision) {
	for _, e := range evals {
		if e.name != signals.ForegroundLatency {
			continue
		}
		if e.unknown != "" {
			d.Foreground, d.ForegroundAt = 1, now
		} else {
			d.Foreground, d.ForegroundAt = max(e.pressure, e.rawPress), e.at
			if e.rawPress <= 1 && e.pressure > 1 {
				// A new sample under target while the smoothed reading
				// lags over it: batches answer to the sample, so a cut
				// that worked does not go on shrinking them.
				d.Foreground = e.rawPress
			}
		}
	}
}

// decide sets the step's mode, code and reason in d: critical, stale,
// warming up or paused by holds, or else the ordinary step (control). It
// returns the signals behind a critical or stale pause.
func (c *Controller) decide(now time.Time, t tickEvals, r readings, healthy, allHeld bool, holds map[status.Job][]hold.Hold, d *Decision) (pausedBy []string) {
	switch {
	case c.critical != nil:
		c.enterPause(status.ModeCritical)
		d.Mode, d.Latched = status.ModeCritical, c.critical.latched
		d.Binding = c.critical.signal
		d.Code, d.Reason = status.CodeCritical, c.criticalReason(now)
		for _, m := range c.critical.members {
			pausedBy = append(pausedBy, string(m.name))
		}
	case len(t.staleReq) > 0:
		if c.enterPause(status.ModeStale) {
			d.Events = append(d.Events, status.Event{Kind: status.EventStale, At: now, Signal: t.staleReq[0].key, Jobs: c.runningJobs(),
				Message: fmt.Sprintf("stale: %s (%s); all work stopped", t.staleReq[0].key, t.staleReq[0].unknown)})
		}
		d.Mode, d.Binding = status.ModeStale, t.staleReq[0].binding()
		var parts []string
		for _, e := range t.staleReq {
			parts = append(parts, fmt.Sprintf("%s (%s)", e.key, e.unknown))
		}
		d.Code, d.Reason = status.CodeStale, "stale: "+strings.Join(parts, ", ")
		for _, e := range t.staleReq {
			pausedBy = append(pausedBy, string(e.name))
		}
	case len(t.warmingReq) > 0 && !allHeld:
		// A required signal still learning its normal (the canary's
		// baseline): no work until it knows, but nothing is wrong, so no
		// event and no page; the budget before it is kept.
		c.enterPause(status.ModeThrottled)
		d.Mode, d.Binding = status.ModeThrottled, t.warmingReq[0].binding()
		var parts []string
		for _, e := range t.warmingReq {
			parts = append(parts, fmt.Sprintf("%s (%s)", e.key, e.unknown))
			pausedBy = append(pausedBy, string(e.name))
		}
		d.Code, d.Reason = status.CodeWarmingUp, "warming up: "+strings.Join(parts, ", ")
	case allHeld:
		if c.enterPause(status.ModePaused) {
			d.Events = append(d.Events, status.Event{Kind: status.EventPaused, At: now, Jobs: c.runningJobs(), Message: "every job is held"})
		}
		d.Mode = status.ModePaused
		d.Code, d.Reason = status.CodeHeld, status.HeldReason(holds[c.anyJob()])
	default:
		if c.pause != nil {
			c.leavePause(now, d)
		}
		if c.tookOver && healthy && c.budget < c.cfg.InitialBudget {
			// Taking over on a healthy primary: whatever cut the previous
			// leader's budget is gone, so start where a new client would.
			c.budget, c.changedAt = c.cfg.InitialBudget, now
		}
		frozen := len(t.unknownOpt) > 0 || t.missed
		c.control(now, r, frozen, d)
		c.tookOver, c.worked = false, true
		if frozen && d.Mode == status.ModeRunning {
			d.Code = status.CodeNotGrowing
		}
		if len(t.unknownOpt) > 0 {
			d.Reason += fmt.Sprintf("; not growing: %s unknown (%s)", t.unknownOpt[0].key, t.unknownOpt[0].unknown)
		} else if t.missed {
			d.Reason += "; not growing: a required signal has no new sample"
		}
	}
	return pausedBy
}

// gated returns each job's gates that shut it now (its job rules over
// target), less those an exemption lifts.
func (c *Controller) gated(now time.Time, snap signals.Snapshot, exempt map[status.Job][]hold.Hold) map[status.Job][]gate {
	var gated map[status.Job][]gate
	for _, j := range c.order {
		gs := c.gatesFor(now, snap, j, c.jobs[j])
		if hs := exempt[j]; len(gs) > 0 && len(hs) > 0 {
			gs = slices.DeleteFunc(gs, func(g gate) bool { return hold.Exempts(hs, string(g.name)) })
		}
		if len(gs) > 0 {
			if gated == nil {
				gated = map[status.Job][]gate{}
			}
			gated[j] = gs
		}
	}
	return gated
}

// pageExemptWhileCritical adds one event for each job that runs through
// a critical pause under an exemption, once per pause.
func (c *Controller) pageExemptWhileCritical(now time.Time, d *Decision) {
	for _, j := range c.order {
		s, jd := c.jobs[j], d.Jobs[j]
		switch {
		case jd.Code != status.CodeExempt:
			s.exemptPaged = false
		case d.Mode == status.ModeCritical && !s.exemptPaged:
			s.exemptPaged = true
			h := jd.Holds[0]
			d.Events = append(d.Events, status.Event{Kind: status.EventExemptCritical, At: now, Signal: d.Binding.String(), Jobs: []status.JobRate{{Job: j, Rate: jd.Rate}},
				Message: fmt.Sprintf("job %s runs while critical, at %.3g batches/s: exempt from %s by hold %s by %s: %s", j, jd.Rate, h.Exempt, h.ID, h.Actor, h.Reason)})
		}
	}
}
