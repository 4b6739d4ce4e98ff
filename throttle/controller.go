package throttle

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/throttled/throttled/signals"
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
//     when one sample reaches EmergencyPressure. Under GrowBelow, with every
//     signal fresh and the jobs using most of their budget, it grows at
//     most every GrowEvery ticks by at most MaxGrowth, tapering as pressure
//     nears GrowBelow (but doubling, like TCP's slow start, while under
//     half the budget before the last pause with plenty of room), and only
//     by ProbeGrowth past 90 % of the lowest
//     budget at which a breach happened in the last BreachMemory, after a
//     calm tenth of it. Between GrowBelow and 1 it holds. Over target means
//     the smoothed pressure over 1, or two raw samples in a row over 1.
//   - After any pause (critical, stale, a hold) work restarts at SlowStart
//     of the budget before it, never at the old rate.
//
// A Controller is safe for concurrent use: jobs Report while a loop Steps.
type Controller struct {
	cfg Config

	mu    sync.Mutex
	jobs  map[Job]*jobState
	order []Job

	budget       float64 // kept through pauses; the output is 0 while paused
	lastStep     time.Time
	changedAt    time.Time        // when the budget last changed
	cutAt        time.Time        // when it was last cut
	cutPressure  float64          // pressure at the last cut
	overTarget   bool             // the last tick was over target
	rawOver      int              // consecutive ticks with a raw sample over target
	rawEmergency int              // consecutive ticks with a raw sample at EmergencyPressure
	emergencyAt  float64          // the pressure that gave the last emergency cut its evidence
	trends       map[string]trend // integrating signals' recent direction, by rule key
	inherited    float64          // a previous leader's budget, while growing back toward it
	tookOver     bool             // inherited, and no ordinary step yet
	ceiling      float64          // budget at which the last breach began
	ceilingAt    time.Time
	ceilingLag   bool                 // the last breach was replica lag's
	ssthresh     float64              // slow-start threshold: the budget before the last pause
	lastAt       map[string]time.Time // last sample time seen, per rule key
	overCritical map[string]*overCount
	critical     *criticalPause
	criticals    []time.Time // starts of critical pauses, for the latch
	pause        *pauseEpisode
	errWindow    []errTick
	errorFloor   float64 // while errors bind: the least their cuts leave
	prev         Decision
}

type jobState struct {
	cfg      JobConfig
	batches  int // since the last step
	errors   int
	duration time.Duration
	usage    float64       // tokens per second, smoothed
	idle     int           // consecutive ticks using under half its rate
	avgDur   time.Duration // smoothed batch duration
	seen     bool          // any report ever
	rate     float64       // last allocated rate
	held     bool
	heldRate float64 // rate when the hold began
	rampCap  float64 // after a hold: the rate cap while ramping back; 0 for none
}

type overCount struct {
	n           int
	lastAt      time.Time
	firstBudget float64 // budget when the run of samples began
}

type criticalPause struct {
	since      time.Time
	signal     string // the signal that began it
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
	at         float64
	lowerWorse bool
}

type pauseEpisode struct {
	mode   Mode
	budget float64 // budget before the pause, for slow start
}

type errTick struct {
	at              time.Time
	batches, errors int
}

// New validates cfg, fills its defaults and returns a Controller at
// cfg.InitialBudget with no jobs.
func New(cfg Config) (*Controller, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:          cfg,
		jobs:         map[Job]*jobState{},
		budget:       cfg.InitialBudget,
		lastAt:       map[string]time.Time{},
		overCritical: map[string]*overCount{},
		trends:       map[string]trend{},
	}
	if prev := min(cfg.PreviousBudget, cfg.MaxBudget); prev > 0 {
		// Cautious after a failover, but never below what a new client
		// starts at (or the previous budget, if lower): a leader that
		// took over a moment ago and published its quarter must not make
		// the next one start at a quarter of that. The first step raises
		// a budget under InitialBudget when the primary is healthy.
		c.budget = c.clamp(max(prev*cfg.SlowStart, min(prev, cfg.InitialBudget)))
		c.ssthresh, c.inherited, c.tookOver = prev, prev, true
	}
	if in := cfg.Inherited; in != nil {
		c.inherit(*in)
	}
	return c, nil
}

// inherit takes over a previous leader's critical pause: the rule that
// began it must go quiet for the quiet period (after a person resumes, if
// latched), and the slow start after it counts from the budget before it.
func (c *Controller) inherit(in CriticalState) {
	key := in.Signal
	name, _, _ := strings.Cut(key, "{")
	rule, ok := c.cfg.Rules[signals.Name(name)]
	if !ok || rule.Critical == 0 {
		// A rule since removed or relaxed: hold on primary_load's.
		key, name, rule = string(signals.PrimaryLoad), string(signals.PrimaryLoad), c.cfg.Rules[signals.PrimaryLoad]
	}
	rl := ruleEval{key: key, name: signals.Name(name), rule: rule}.resumeLevel(c.cfg.ResumeLevel)
	c.critical = &criticalPause{since: in.Since, signal: key, threshold: rule.Critical, resumeAt: rl.at, lowerWorse: rl.lowerWorse,
		members: map[string]resumeLevel{key: rl}, quiet: c.cfg.QuietPeriod, latched: in.Latched, quietSince: in.QuietSince}
	if key == in.Signal && in.Threshold != 0 {
		c.critical.value, c.critical.threshold, c.critical.valueKnown = in.Value, in.Threshold, true
	}
	c.pause = &pauseEpisode{mode: ModeCritical, budget: in.Budget}
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
// registered.
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
	if s, ok := c.jobs[j.Name]; ok {
		s.cfg = j
		return nil
	}
	c.jobs[j.Name] = &jobState{cfg: j}
	c.order = append(c.order, j.Name)
	return nil
}

// Unregister removes a job; unknown names are ignored.
func (c *Controller) Unregister(j Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, j)
	c.order = slices.DeleteFunc(c.order, func(x Job) bool { return x == j })
}

// Report records one batch attempt of job j (a retry is an attempt like
// any other). Reports for unknown jobs are ignored.
func (c *Controller) Report(j Job, f Feedback) {
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
func (c *Controller) ReportMany(j Job, n, errs int, took time.Duration) {
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

// Registered reports whether j is registered.
func (c *Controller) Registered(j Job) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.jobs[j]
	return ok
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
	c.prev.Events = append(c.prev.Events, Event{Kind: EventResumed, At: now, Signal: c.critical.signal,
		Message: fmt.Sprintf("latched critical pause on %s resumed by %s", c.critical.signal, actor)})
	return true
}

// ruleEval is one rule applied to one sample.
type ruleEval struct {
	key        string
	name       signals.Name
	rule       Rule
	required   bool
	value, raw float64 // as the rule reads it: the free fraction for headroom
	pressure   float64 // smoothed value over target
	rawPress   float64
	unknown    string // why the sample is unusable; "" when usable
	at         time.Time
	fresh      bool // a sample not seen at an earlier step
}

func (e ruleEval) lowerWorse() bool { return lowerIsWorse(e.name) }

// oneStepLower is the raw pressure the sample would have one Resolution
// step better: what a single sample proves beyond quantization.
func (e ruleEval) oneStepLower() float64 {
	if e.lowerWorse() {
		return pressure(e.raw+e.rule.Resolution, e.rule.Target, true)
	}
	return pressure(e.raw-e.rule.Resolution, e.rule.Target, false)
}

// evaluate applies every rule to the snapshot.
func (c *Controller) evaluate(now time.Time, snap signals.Snapshot) []ruleEval {
	var out []ruleEval
	for _, name := range ruleSignals {
		rule, ok := c.cfg.Rules[name]
		if !ok {
			continue
		}
		if perReplica(name) {
			out = append(out, c.evaluateReplicas(now, snap, name, rule)...)
			continue
		}
		sampleName := name
		if name == signals.ConnectionHeadroom {
			sampleName = signals.ConnectionUsedFraction
		}
		s, ok := snap.Get(sampleName, nil)
		e := ruleEval{key: string(name), name: name, rule: rule, required: rule.Required}
		if !ok {
			e.unknown = "not sampled"
		} else {
			c.read(now, &e, s)
		}
		out = append(out, e)
	}
	return out
}

func (c *Controller) evaluateReplicas(now time.Time, snap signals.Snapshot, name signals.Name, rule Rule) []ruleEval {
	var out []ruleEval
	seen := map[string]bool{}
	for _, s := range snap.Samples {
		if s.Name != name {
			continue
		}
		replica := s.Labels[signals.LabelReplica]
		seen[replica] = true
		policy := c.replicaPolicy(replica)
		if policy == ReplicaIgnored {
			continue
		}
		e := ruleEval{key: s.Key(), name: name, rule: rule, required: policy == ReplicaRequired}
		c.read(now, &e, s)
		out = append(out, e)
	}
	// A required replica that is not even in the snapshot is unknown.
	for replica, p := range c.cfg.Replicas {
		if p == ReplicaRequired && !seen[replica] {
			key := signals.Sample{Name: name, Labels: map[string]string{signals.LabelReplica: replica}}.Key()
			out = append(out, ruleEval{key: key, name: name, rule: rule, required: true, unknown: "not sampled"})
		}
	}
	slices.SortFunc(out, func(a, b ruleEval) int { return strings.Compare(a.key, b.key) })
	return out
}

func (c *Controller) replicaPolicy(name string) ReplicaPolicy {
	if p, ok := c.cfg.Replicas[name]; ok {
		return p
	}
	return ReplicaOptional
}

// read fills e from sample s: usable, or why not.
func (c *Controller) read(now time.Time, e *ruleEval, s signals.Sample) {
	e.at = s.At
	switch age := s.Age(now); {
	case s.Err != nil:
		e.unknown = "error: " + s.Err.Error()
		return
	case age > e.rule.MaxAge:
		e.unknown = fmt.Sprintf("age %s over max_age %s", age.Round(time.Millisecond), e.rule.MaxAge)
		return
	case age < -e.rule.MaxAge:
		// A clock this far off cannot vouch for the sample's freshness.
		e.unknown = fmt.Sprintf("taken %s in the future (clock skew)", (-age).Round(time.Millisecond))
		return
	case !finite(s.Value) || !finite(s.Raw):
		e.unknown = fmt.Sprintf("non-finite value %v (raw %v)", s.Value, s.Raw)
		return
	}
	e.value, e.raw = s.Value, s.Raw
	if e.name == signals.ConnectionHeadroom {
		e.value, e.raw = max(0, 1-s.Value), max(0, 1-s.Raw)
	}
	e.pressure, e.rawPress = pressure(e.value, e.rule.Target, e.lowerWorse()), pressure(e.raw, e.rule.Target, e.lowerWorse())
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func pressure(v, target float64, lowerWorse bool) float64 {
	if lowerWorse {
		return target / max(v, 1e-9)
	}
	return v / target
}

// Step decides the budget and allocations at now from snap.
func (c *Controller) Step(now time.Time, snap signals.Snapshot) Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	dt := c.cfg.Tick
	if !c.lastStep.IsZero() && now.After(c.lastStep) {
		dt = now.Sub(c.lastStep)
	}
	c.lastStep = now
	d := Decision{At: now, Events: c.prev.Events}
	c.prev.Events = nil
	batches, errs := c.updateUsage(now, dt)
	evals := c.evaluate(now, snap)

	// Which samples are new since the last step, and which are unknown. A
	// sample seen at an earlier step counts once: it is not a second
	// reading.
	var staleReq, unknownOpt []ruleEval
	missed := false
	for i := range evals {
		e := &evals[i]
		if e.unknown != "" {
			if e.required {
				staleReq = append(staleReq, *e)
			} else {
				unknownOpt = append(unknownOpt, *e)
			}
			continue
		}
		last := c.lastAt[e.key]
		e.fresh = last.IsZero() || e.at.After(last)
		if e.fresh {
			c.lastAt[e.key] = e.at
		} else if e.required {
			missed = true // no new sample this tick: freeze growth
		}
	}
	worst := ruleEval{}
	var rawWorst, jump ruleEval // the fresh sample under most raw pressure; one that is an emergency alone
	var rising ruleEval         // an integrating signal rising toward its target
	var maxRaw, maxRawFresh float64
	anyFresh, healthy := false, len(staleReq) == 0 && len(unknownOpt) == 0 && !missed
	for _, e := range evals {
		if e.unknown != "" {
			continue
		}
		if worst.key == "" || e.pressure > worst.pressure {
			worst = e
		}
		// A raw sample counts one Resolution step lower: on 2 cores the
		// job's own session and one foreground statement read 1.0 (1.43
		// of target) at any budget, twice in a row often enough.
		maxRaw = max(maxRaw, e.oneStepLower())
		healthy = healthy && max(e.pressure, e.rawPress) < c.cfg.GrowBelow/2
		if !e.fresh {
			continue
		}
		maxRawFresh, anyFresh = max(maxRawFresh, e.oneStepLower()), true
		if rawWorst.key == "" || e.rawPress > rawWorst.rawPress {
			rawWorst = e
		}
		if e.oneStepLower() >= c.cfg.EmergencyPressure && (jump.key == "" || e.rawPress > jump.rawPress) {
			jump = e
		}
		if integrates(e.name) && c.rising(e) && (rising.key == "" || e.rawPress > rising.rawPress) {
			rising = e
		}
	}

	for _, e := range evals {
		if e.name != signals.ForegroundLatency {
			continue
		}
		if e.unknown != "" {
			d.Foreground, d.ForegroundAt = 1, now
		} else {
			d.Foreground, d.ForegroundAt = max(e.pressure, e.rawPress), e.at
		}
	}
	c.trackCritical(now, evals, &d)
	holds, allHeld := c.holds(now)

	switch {
	case c.critical != nil:
		c.enterPause(ModeCritical)
		d.Mode, d.Latched = ModeCritical, c.critical.latched
		d.Binding = c.critical.signal
		d.Reason = c.criticalReason(now)
	case len(staleReq) > 0:
		if c.enterPause(ModeStale) {
			d.Events = append(d.Events, Event{Kind: EventStale, At: now, Signal: staleReq[0].key, Jobs: c.runningJobs(),
				Message: fmt.Sprintf("stale: %s (%s); all work stopped", staleReq[0].key, staleReq[0].unknown)})
		}
		d.Mode, d.Binding = ModeStale, staleReq[0].key
		var parts []string
		for _, e := range staleReq {
			parts = append(parts, fmt.Sprintf("%s (%s)", e.key, e.unknown))
		}
		d.Reason = "stale: " + strings.Join(parts, ", ")
	case allHeld:
		if c.enterPause(ModePaused) {
			d.Events = append(d.Events, Event{Kind: EventPaused, At: now, Jobs: c.runningJobs(), Message: "every job is held"})
		}
		d.Mode = ModePaused
		d.Reason = "paused: " + describeHolds(holds[c.anyJob()])
	default:
		if c.pause != nil {
			c.leavePause(now, &d)
		}
		if c.tookOver && healthy && errs == 0 && c.budget < c.cfg.InitialBudget {
			// Taking over on a healthy primary: whatever cut the previous
			// leader's budget is gone, so start where a new client would.
			c.budget, c.changedAt = c.cfg.InitialBudget, now
		}
		c.control(now, readings{worst: worst, rawWorst: rawWorst, jump: jump, rising: rising, maxRaw: maxRaw, maxRawFresh: maxRawFresh, anyFresh: anyFresh,
			batches: batches, errors: errs}, len(unknownOpt) > 0 || missed, &d)
		c.tookOver = false
		if len(unknownOpt) > 0 {
			d.Reason += fmt.Sprintf("; not growing: %s unknown (%s)", unknownOpt[0].key, unknownOpt[0].unknown)
		} else if missed {
			d.Reason += "; not growing: a required signal has no new sample"
		}
	}
	if d.Mode == ModeRunning || d.Mode == ModeThrottled {
		d.Budget = c.budget
	}
	d.Jobs = c.allocate(now, d.Budget, d.Mode, d.Reason, holds)
	c.prev = d
	c.prev.Events = nil
	return d
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
		switch {
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
			d.Events = append(d.Events, Event{Kind: EventCritical, At: now, Signal: e.key, Value: e.raw, Threshold: e.rule.Critical,
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
	if e.lowerWorse() {
		return e.raw <= e.rule.Critical
	}
	return e.raw >= e.rule.Critical
}

// resumeLevel is the level the signal must stay past to end a critical
// pause: a fraction of the critical level, or for a level to stay over,
// the critical level divided by it.
func (e ruleEval) resumeLevel(fraction float64) resumeLevel {
	if e.lowerWorse() {
		return resumeLevel{at: e.rule.Critical / fraction, lowerWorse: true}
	}
	return resumeLevel{at: e.rule.Critical * fraction}
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
		since: now, signal: e.key, value: e.raw, threshold: e.rule.Critical, valueKnown: true, resumeAt: rl.at,
		lowerWorse: e.lowerWorse(), members: map[string]resumeLevel{e.key: rl}, quiet: quiet,
		latched: len(c.criticals) >= c.cfg.LatchAfter,
	}
	// Slow start restarts from the budget before the breach began, not
	// from what the cuts on the way left.
	if c.pause == nil || c.pause.mode != ModeCritical {
		c.pause = &pauseEpisode{mode: ModeCritical, budget: budgetBefore}
	}
	kind, msg := EventCritical, fmt.Sprintf("critical: %s at %.3g, at or past %.3g for %d samples; all jobs paused",
		e.key, e.raw, e.rule.Critical, c.cfg.CriticalWindow)
	if c.critical.latched {
		kind = EventLatched
		msg += fmt.Sprintf("; %d critical pauses within %s: latched until a person resumes", len(c.criticals), c.cfg.LatchWindow)
	}
	d.Events = append(d.Events, Event{Kind: kind, At: now, Signal: e.key, Value: e.raw, Threshold: e.rule.Critical,
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
	d.Events = append(d.Events, Event{Kind: EventRecovered, At: now, Signal: cp.signal, Threshold: cp.resumeAt,
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
func (c *Controller) enterPause(m Mode) bool {
	if c.pause == nil {
		c.pause = &pauseEpisode{mode: m, budget: c.budget}
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
	case ModeStale:
		d.Events = append(d.Events, Event{Kind: EventFresh, At: now, Message: "every required signal is fresh again"})
	case ModePaused:
		d.Events = append(d.Events, Event{Kind: EventUnpaused, At: now, Message: "holds released"})
	}
	// A critical pause is a breach at the budget it began at; a stale
	// signal or a hold says nothing against the budget before it.
	if c.pause.mode == ModeCritical {
		c.ceiling, c.ceilingAt = before, now
	}
	c.pause, c.inherited = nil, 0
	c.budget = c.clamp(before * c.cfg.SlowStart)
	c.ssthresh = before
	c.changedAt, c.cutAt = now, now
	c.overTarget, c.rawOver = false, 0
}

// readings are what one step saw, for control.
type readings struct {
	worst       ruleEval // the usable rule with the highest pressure
	rawWorst    ruleEval // the new sample with the highest raw pressure
	jump        ruleEval // a new sample at EmergencyPressure even one Resolution step lower
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
	pSig, binding := r.worst.pressure, r.worst.key
	// Batch errors: over MaxErrorFraction with enough batches to judge,
	// they cut like a breach; with too few, they only stop growth.
	errFrac := 0.0
	if r.batches > 0 {
		errFrac = float64(r.errors) / float64(r.batches)
	}
	errJudged := r.batches >= c.cfg.MinErrorBatches
	errPressure := 0.0
	if errJudged {
		errPressure = errFrac / c.cfg.MaxErrorFraction
	}
	errorsBind := errPressure > 1 && errPressure > pSig
	p := pSig
	if errorsBind {
		p, binding = min(errPressure, c.cfg.EmergencyPressure*0.99), "job_error_fraction"
	}
	d.Binding, d.Pressure = binding, p
	if binding == "" {
		d.Mode, d.Reason = ModeThrottled, "throttled: no rule has a usable signal; not growing"
		return
	}
	// Over target: the smoothed pressure says so, or two new raw samples
	// in a row do (the smoothing would otherwise delay the cut by
	// seconds). A sample seen before is not a second reading.
	if r.anyFresh {
		if r.maxRawFresh > 1 {
			c.rawOver++
		} else {
			c.rawOver = 0
		}
		// Two samples in a row at the emergency level are evidence when
		// even one Resolution step lower they are over target.
		if r.rawWorst.rawPress >= c.cfg.EmergencyPressure && r.rawWorst.oneStepLower() > 1 {
			c.rawEmergency++
		} else {
			c.rawEmergency = 0
		}
	}
	signalOver := pSig > 1 || c.rawOver >= 2
	over := signalOver || errPressure > 1
	if over && !c.overTarget {
		// A new breach: remember the budget it began at. A recent, lower
		// breach budget is kept: the lowest bad rate is the one to trust.
		if c.ceiling == 0 || now.Sub(c.ceilingAt) >= c.cfg.BreachMemory || c.budget < c.ceiling {
			c.ceiling = c.budget
		}
		c.ceilingAt = now
		c.ceilingLag = integrates(r.worst.name) && pSig > 1 || integrates(r.rawWorst.name) && c.rawOver >= 2
	}
	c.overTarget = over
	// Errors alone never cut below a quarter of the budget they began at:
	// when they do not depend on the rate, cutting further buys nothing.
	// A signal over target cuts as far as it must.
	floor := 0.0
	switch {
	case errPressure <= 1:
		c.errorFloor = 0
	case !signalOver:
		if c.errorFloor == 0 {
			c.errorFloor = c.budget * c.cfg.SlowStart
		}
		floor = c.errorFloor
	}
	describe := fmt.Sprintf("%s at %.2f of target", binding, p)
	switch {
	case errorsBind:
		describe = fmt.Sprintf("%.0f%% of %d batches failed (limit %.0f%%)", 100*errFrac, r.batches, 100*c.cfg.MaxErrorFraction)
	case pSig <= 1 && c.rawOver >= 2 && r.rawWorst.key != "":
		// Over on raw samples alone: name the signal whose samples they
		// are, not the one with the highest smoothed pressure.
		binding = r.rawWorst.key
		describe = fmt.Sprintf("%s samples over target twice in a row (now %.2f of target; smoothed %.2f)",
			binding, r.rawWorst.rawPress, r.rawWorst.pressure)
	}
	d.Binding = binding
	// An emergency needs evidence that the load is real: the smoothed
	// pressure, a sample that would reach the level even one Resolution
	// step lower (one session fewer on few cores), or two samples in a
	// row. The cut names the signal that gave the evidence.
	emergency, evidence, eBinding, eName := "", 0.0, "", signals.Name("")
	switch {
	case pSig >= c.cfg.EmergencyPressure:
		emergency = fmt.Sprintf("%s at %.2f of target, smoothed", r.worst.key, pSig)
		evidence, eBinding, eName = pSig, r.worst.key, r.worst.name
	case r.jump.key != "":
		emergency = fmt.Sprintf("a %s sample at %.2f of target (reading %.3g; smoothed %.2f of target)",
			r.jump.key, r.jump.rawPress, r.jump.raw, r.jump.pressure)
		evidence, eBinding, eName = r.jump.rawPress, r.jump.key, r.jump.name
	case c.rawEmergency >= 2:
		emergency = fmt.Sprintf("%s samples at %.2f of target or more twice in a row (reading %.3g; smoothed %.2f of target)",
			r.rawWorst.key, r.rawWorst.rawPress, r.rawWorst.raw, r.rawWorst.pressure)
		evidence, eBinding, eName = r.rawWorst.rawPress, r.rawWorst.key, r.rawWorst.name
	}
	tick := c.cfg.Tick
	// Replica lag integrates the excess of WAL over what the replica
	// applies: a cut shows in it only as the backlog drains, seconds
	// later. So an emergency cut on lag is repeated at the next tick only
	// on evidence of more pressure than the last one's; three cuts of
	// EmergencyCut in a row on a lag already falling left 1/64 of the
	// budget. (Load answers a cut within a tick: its cuts repeat.)
	if emergency != "" && integrates(eName) && now.Sub(c.cutAt) < 2*tick-tick/2 && evidence <= c.emergencyAt {
		emergency = ""
	}
	if emergency != "" {
		d.Binding = eBinding
	}
	switch {
	case emergency != "":
		// A breach at this budget: growth doubles back to 90 % of it once
		// the pressure is gone, and probes past it only after a calm.
		if !over && (c.ceiling == 0 || now.Sub(c.ceilingAt) >= c.cfg.BreachMemory || c.budget < c.ceiling) {
			c.ceiling, c.ceilingAt = c.budget, now
		}
		c.cut(now, 1-c.cfg.EmergencyCut, p, 0)
		c.emergencyAt = evidence
		d.Mode, d.Reason = ModeThrottled, fmt.Sprintf("throttled: emergency cut by %.0f%%: %s", 100*c.cfg.EmergencyCut, emergency)
	case over && (now.Sub(c.cutAt) >= 2*tick-tick/2 || p > c.cutPressure):
		f := max(1-c.cfg.MaxCut, min(0.95, 1/max(p, r.maxRawFresh)))
		c.cut(now, f, p, floor)
		d.Mode, d.Reason = ModeThrottled, fmt.Sprintf("throttled: cut by %.0f%%: %s", 100*(1-f), describe)
	case over:
		d.Mode, d.Reason = ModeThrottled, "throttled: "+describe+"; letting the last cut take effect"
	case max(pSig, r.maxRaw) >= c.cfg.GrowBelow:
		d.Mode, d.Reason = ModeThrottled, "throttled: "+describe+"; holding"
	case errFrac > c.cfg.MaxErrorFraction:
		d.Mode, d.Reason = ModeThrottled, fmt.Sprintf("throttled: %s; holding: %d of the last %d batches failed", describe, r.errors, r.batches)
	default:
		// Under target: the signal is named only when it is what limits
		// the budget; otherwise the reason says what does.
		var limit string
		var bySignal bool
		if r.rising.key != "" {
			// A budget past what the replica applies shows first as lag
			// rising at every sample, long before the lag reaches its
			// target: growing further would only make the cut later and
			// deeper.
			limit, bySignal = fmt.Sprintf("%s rising, at %.2f of target; budget %.3g/s held", r.rising.key, r.rising.rawPress, c.budget), true
			d.Binding = r.rising.key
		} else {
			limit, bySignal = c.grow(now, max(pSig, r.maxRaw), r.worst.key, frozen)
		}
		d.Mode, d.Reason = ModeRunning, "running: "+limit
		if !bySignal {
			d.Binding = ""
		}
	}
}

// cut multiplies the budget by factor, not below floor.
func (c *Controller) cut(now time.Time, factor, p, floor float64) {
	c.budget = c.clamp(max(c.budget*factor, min(floor, c.budget)))
	c.changedAt, c.cutAt, c.cutPressure, c.emergencyAt = now, now, p, 0
}

// Growth after a breach comes back at once to breachSafe of the budget the
// breach began at, breachSafeLag for a breach of replica lag; past that it
// only probes, after a calm.
const (
	breachSafe    = 0.9
	breachSafeLag = 0.8
)

// trend is an integrating signal's direction over its recent samples.
type trend struct {
	last  float64
	rises int // consecutive fresh samples each above the one before
}

// Rising lag: risingSamples fresh samples in a row, each higher than the
// one before, with the last at risingShare of the target or more. Below
// that share the lag is noise around zero.
const (
	risingSamples = 3
	risingShare   = 0.25
)

// rising records e's fresh sample and reports whether the signal has
// risen at each of its last risingSamples samples, from risingShare of its
// target.
func (c *Controller) rising(e ruleEval) bool {
	tr, ok := c.trends[e.key]
	switch {
	case !ok:
	case e.raw > tr.last:
		tr.rises++
	default:
		tr.rises = 0
	}
	tr.last = e.raw
	c.trends[e.key] = tr
	return tr.rises >= risingSamples && e.rawPress >= risingShare
}

// integrates reports whether n accumulates the excess of the rate it is
// paced on, so a cut shows in it only over time: replica lag.
func integrates(n signals.Name) bool {
	return n == signals.ReplicaLagBytes || n == signals.ReplicaLagSeconds || n == signals.ReplicaReplayBacklogBytes
}

// grow raises the budget toward the pressure at which it would reach
// GrowBelow, and returns what limits the budget now and whether that is
// the signal key (pressure p). Far under target (p under half of
// GrowBelow) it doubles each step: after a pause up to half the budget
// before it, after a breach up to 90 % of the budget the breach began at,
// so a cut is undone within seconds once the pressure is gone. Nearer the
// target it grows by at most MaxGrowth, tapering; near the budget of the
// last breach it only probes, and only with clear room: twice the
// deadband below GrowBelow.
func (c *Controller) grow(now time.Time, p float64, key string, frozen bool) (limit string, bySignal bool) {
	b := fmt.Sprintf("budget %.3g/s", c.budget)
	if c.budget >= c.cfg.MaxBudget {
		return fmt.Sprintf("%s, the most allowed (max_rate)", b), false
	}
	if frozen {
		return b + " held", false
	}
	// Use is measured over about 5 s; a budget of under two batches in
	// that time cannot show it, and a job that waits that long for its
	// next token is not idle.
	if u := c.utilization(); u < c.cfg.MinUtilization && c.budget*usageTau.Seconds() >= 2 {
		return fmt.Sprintf("low utilization: %s; not growing: jobs use %.0f%% of the budget", b, 100*u), false
	}
	room := c.cfg.GrowBelow / max(p, 1e-3)
	f := min(c.cfg.MaxGrowth, room)
	limit = fmt.Sprintf("%s, growing by up to %.0f%% every %s", b, 100*(c.cfg.MaxGrowth-1), time.Duration(c.cfg.GrowEvery)*c.cfg.Tick)
	if room < c.cfg.MaxGrowth {
		limit, bySignal = fmt.Sprintf("%s at %.2f of target; %s, growing as it allows", key, p, b), true
	}
	roomy := p < c.cfg.GrowBelow/2
	if c.budget < c.ssthresh/2 && roomy {
		// Slow start, as TCP's: after a pause, far under the budget before
		// it and with plenty of room, double each step up to half of it.
		f = min(2, room, c.ssthresh/2/c.budget)
		limit = fmt.Sprintf("slow start: %s, doubling back toward %.3g/s, the budget before the pause", b, c.ssthresh)
		if c.inherited > 0 {
			limit = fmt.Sprintf("inherited budget: %s, doubling back toward %.3g/s, the last leader's", b, c.inherited)
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
		switch {
		case c.budget < safe:
			if roomy {
				// After a cut, with the pressure far under target: what
				// cut it is gone, so double back toward the breach's
				// budget rather than creep.
				f = max(f, min(2, room))
			}
			f = min(f, safe/c.budget)
			if !bySignal {
				limit = fmt.Sprintf("%s, growing back toward %.3g/s, under the %.3g/s of a breach %s ago", b, safe, c.ceiling, now.Sub(c.ceilingAt).Round(time.Second))
			}
		case p < c.cfg.GrowBelow-(1-c.cfg.GrowBelow) && now.Sub(c.ceilingAt) >= c.cfg.BreachMemory/10:
			f = min(f, c.cfg.ProbeGrowth)
			limit, bySignal = fmt.Sprintf("%s, probing by %.0f%% past the %.3g/s of a breach %s ago", b, 100*(c.cfg.ProbeGrowth-1), c.ceiling, now.Sub(c.ceilingAt).Round(time.Second)), false
		default:
			if !bySignal {
				limit = fmt.Sprintf("%s, near the %.3g/s of a breach %s ago; probing past it after %s calm", b, c.ceiling, now.Sub(c.ceilingAt).Round(time.Second), c.cfg.BreachMemory/10)
			}
			return limit, bySignal
		}
	}
	every := time.Duration(c.cfg.GrowEvery) * c.cfg.Tick
	if f <= 1 || now.Sub(c.changedAt) < every-c.cfg.Tick/2 {
		return limit, bySignal
	}
	c.budget = c.clamp(c.budget * f)
	c.changedAt = now
	if c.budget >= c.ssthresh {
		c.inherited = 0
	}
	return limit, bySignal
}

func (c *Controller) utilization() float64 {
	var used float64
	for _, s := range c.jobs {
		used += s.usage
	}
	return used / c.budget
}

func (c *Controller) clamp(b float64) float64 {
	return min(c.cfg.MaxBudget, max(c.cfg.MinBudget, b))
}

// holds asks the hold source which holds apply to each job, and whether
// every job (or, with none registered, all jobs) is held.
func (c *Controller) holds(now time.Time) (map[Job][]Hold, bool) {
	out := map[Job][]Hold{}
	if c.cfg.Holds == nil {
		return out, false
	}
	all := true
	for _, j := range c.order {
		if h := c.cfg.Holds.Applying(now, j); len(h) > 0 {
			out[j] = h
		} else {
			all = false
		}
	}
	if len(c.order) == 0 {
		h := c.cfg.Holds.Applying(now, "")
		out[""] = h
		all = len(h) > 0
	}
	return out, all
}

func (c *Controller) anyJob() Job {
	if len(c.order) == 0 {
		return ""
	}
	return c.order[0]
}

func describeHolds(hs []Hold) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("hold %s on %s by %s (%s): %s, until %s", h.ID, h.Scope, h.Actor, h.Source, h.Reason, h.Expires.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, "; ")
}

// runningJobs lists the jobs that had a positive rate at the last step.
func (c *Controller) runningJobs() []JobRate {
	var out []JobRate
	for _, j := range c.order {
		if r := c.jobs[j].rate; r > 0 {
			out = append(out, JobRate{Job: j, Rate: r})
		}
	}
	return out
}

// SlowRate is the rate, in batches per second, under which a job (or one
// worker's share of it) waits more than a few seconds for each batch: it
// is shown as throttled, with [SlowReason], never as running.
const SlowRate = 0.2

// SlowReason is the reason of a job or worker held to rate, under
// SlowRate, by a decision whose reason is why.
func SlowReason(rate float64, why string) string {
	every := "never"
	if rate > 0 {
		every = "every " + time.Duration(float64(time.Second)/rate).Round(time.Second).String()
	}
	return fmt.Sprintf("throttled: %.2g batches/s, one batch %s (the budget: %s)", rate, every, why)
}

// usageTau is the time constant of each job's smoothed usage.
const usageTau = 5 * time.Second

// idleTicks is how many ticks of under-use make a job idle, its unused
// share lent to the others.
const idleTicks = 3

// allocate shares budget between the jobs that no hold applies to.
func (c *Controller) allocate(now time.Time, budget float64, mode Mode, reason string, holds map[Job][]Hold) map[Job]JobDecision {
	out := make(map[Job]JobDecision, len(c.order))
	var free []Job
	var claims []claim
	for _, j := range c.order {
		s := c.jobs[j]
		if hs := holds[j]; len(hs) > 0 {
			if !s.held {
				s.held, s.heldRate = true, s.rate
			}
			out[j] = JobDecision{State: JobPaused, Reason: "paused: " + describeHolds(hs), Holds: hs}
			continue
		}
		if s.held {
			// Released: ramp back from a fraction of the rate before.
			s.held = false
			s.rampCap = max(c.cfg.MinBudget, s.heldRate*c.cfg.SlowStart)
		}
		want := math.Inf(1)
		if s.idle >= idleTicks {
			want = s.usage*1.5 + c.cfg.MinBudget // idle: lend the rest
		}
		cl := claim{weight: s.cfg.Weight, floor: s.cfg.MinRate, cap: min(s.cfg.MaxRate, want)}
		if s.rampCap > 0 {
			cl.cap = min(cl.cap, s.rampCap)
		}
		free = append(free, j)
		claims = append(claims, cl)
	}
	rates := share(budget, claims)
	for i, j := range free {
		s := c.jobs[j]
		r := rates[i]
		if s.rampCap > 0 && budget > 0 {
			if r < s.rampCap*0.99 {
				s.rampCap = 0 // the ramp no longer binds
			} else {
				s.rampCap *= c.cfg.MaxGrowth
			}
		}
		s.rate = r
		jd := JobDecision{Allocation: allocation(r, s.avgDur, c.cfg.Tick), State: JobRunning}
		switch {
		case r == 0:
			jd.State, jd.Reason = JobPaused, reason
		case r < SlowRate:
			jd.State, jd.Reason = JobThrottled, SlowReason(r, reason)
		case mode == ModeThrottled:
			jd.State, jd.Reason = JobThrottled, reason
		case r >= s.cfg.MaxRate:
			jd.Reason = fmt.Sprintf("running: at the job's max_rate %.3g/s", s.cfg.MaxRate)
		}
		out[j] = jd
	}
	for j := range holds {
		if s, ok := c.jobs[j]; ok {
			s.rate = 0
		}
	}
	return out
}

// allocation turns a rate into a token bucket: a burst of one tick's
// tokens (at least 1) and an in-flight cap by Little's law with 50 %
// headroom (at least 1).
func allocation(rate float64, avgDur, tick time.Duration) Allocation {
	if rate <= 0 {
		return Allocation{}
	}
	inflight := 1
	if avgDur > 0 {
		inflight = max(1, int(math.Ceil(rate*avgDur.Seconds()*1.5)))
	}
	return Allocation{Rate: rate, Burst: max(1, int(math.Ceil(rate*tick.Seconds()))), MaxInFlight: inflight}
}
