package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/throttled/throttled/internal/jobname"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// Rule is what the controller does with one signal.
//
// For a signal where higher is worse (load, lag), the pressure is
// value/Target: above 1 the background budget is cut. For
// connection_headroom (lower is worse) the rule is on the free fraction of
// client slots, and the pressure is Target/free. Critical, when set, is
// the level at or past which, held for Config.CriticalWindow samples in a
// row, every job is paused and a page is raised.
type Rule struct {
	// Target is the level to keep the signal at or under (at or over, for
	// connection_headroom). Must be positive.
	Target float64
	// Critical is the auto-pause level; 0 means none. It must be past
	// Target: above it, or below it for connection_headroom.
	Critical float64
	// MaxAge is the age past which a sample is stale. Defaults to 3s.
	MaxAge time.Duration
	// Required makes a stale or unreadable sample stop all work (mode
	// stale, budget 0). Not required, it only stops growth while unknown.
	Required bool
	// Resolution is the smallest step of the raw reading, in the signal's
	// unit: for primary_load, one session on CPU, 1/cores. On few cores
	// one session more is a large step (0.5 on 2 cores, 0.71 of the
	// default target), so a single raw sample cuts by EmergencyCut only
	// when it would still reach EmergencyPressure one step lower; two raw
	// samples in a row, or the smoothed value, need no such margin. 0
	// means a continuous reading: one sample suffices.
	Resolution float64
	// Ratio says the reading is a ratio over its level while no job was
	// at work (a Prometheus signal with a job-free baseline), 1.0 at it:
	// the pressure is the excess over that level against the excess the
	// target allows, (v-1)/(Target-1), as for foreground_latency (whose
	// rule is one whatever this says), and Target must be above 1.
	Ratio bool
}

// ratio reports whether the rule on name reads a ratio over a job-free
// level.
func (r Rule) ratio(name signals.Name) bool { return r.Ratio || name == signals.ForegroundLatency }

// external reports whether name is one of Config.External.
func (c *Config) external(name signals.Name) bool { return slices.Contains(c.External, name) }

// ReplicaPolicy says how a replica's lag counts.
type ReplicaPolicy string

// Replica policies.
const (
	// ReplicaRequired: the replica's lag binds, and a missing or stale
	// replica stops all work.
	ReplicaRequired ReplicaPolicy = "required"
	// ReplicaOptional: the replica's lag binds while it is readable; while
	// it is not, the budget does not grow. The default.
	ReplicaOptional ReplicaPolicy = "optional"
	// ReplicaIgnored: the replica's lag is shown, never acted on.
	ReplicaIgnored ReplicaPolicy = "ignored"
)

// JobConfig registers a job with the controller.
type JobConfig struct {
	// Name identifies the job. Required.
	Name status.Job
	// Weight is the job's share of the budget relative to the others.
	// Defaults to 1.
	Weight float64
	// MinRate is a floor the job keeps while the budget allows (tokens per
	// second); 0 means none. A pause, a critical or a stale signal still
	// stops it.
	MinRate float64
	// MaxRate caps the job's rate (tokens per second); 0 means none.
	MaxRate float64
	// Tables are the tables the job writes, as signals.TableName names
	// them (schema.table): a job rule on vacuum_running binds it on these.
	Tables []string
	// Signals, when not nil, are the job rules (Config.JobRules) that bind
	// the job; nil means every one. The cluster rules bind it whatever
	// this says.
	Signals []signals.Name
}

// Config configures a [Controller]. The zero value of every field means
// its default.
type Config struct {
	// Rules maps a signal name to its rule. Entries replace the defaults
	// of the same name; the defaults are primary_load (target 0.7,
	// critical 1.0, required), connection_headroom (keep 10 % free,
	// critical 5 %, required) and replica_lag_seconds (target 2s, no
	// critical). Signals without a rule only inform.
	Rules map[signals.Name]Rule
	// Replicas sets each replica's policy, by name. Replicas not listed are
	// ReplicaOptional.
	Replicas map[string]ReplicaPolicy
	// Tick is the decision interval. Defaults to 1s.
	Tick time.Duration

	// MaxBudget is the most the jobs together may do, in tokens (batches)
	// per second. Defaults to 100.
	MaxBudget float64
	// MinBudget is the least budget while work is allowed: cuts stop
	// there. Defaults to MaxBudget/1000.
	MinBudget float64
	// InitialBudget is the budget at start. Defaults to MaxBudget/10.
	InitialBudget float64

	// GrowBelow is the pressure under which the budget may grow; between
	// it and 1 is the deadband where it holds. Defaults to 0.95.
	GrowBelow float64
	// GrowEvery is how many ticks must pass after any change before the
	// budget grows. Defaults to 3.
	GrowEvery int
	// MaxGrowth is the largest growth factor of one step. Defaults to 1.25.
	MaxGrowth float64
	// ProbeGrowth is the largest growth factor of one step above the
	// budget at which the last breach happened. Defaults to 1.02.
	ProbeGrowth float64
	// MinUtilization is the share of the budget the jobs must use for it to
	// grow: a budget nobody uses proves nothing. Defaults to 0.8.
	MinUtilization float64
	// MaxCut is the largest share one ordinary cut removes. Defaults to
	// 0.5.
	MaxCut float64
	// EmergencyPressure is the pressure at which one sample cuts at once
	// by EmergencyCut. It must lie below every rule's critical pressure
	// (critical over target), so the emergency cut comes before a critical
	// pause. Defaults to 1.3.
	EmergencyPressure float64
	// EmergencyCut is the share an emergency cut removes. Defaults to
	// 0.75.
	EmergencyCut float64
	// EmergencyReadings is how many new readings in a row must reach
	// EmergencyPressure (each still over target one Resolution step
	// lower) for an emergency cut; a smoothed pressure at
	// EmergencyPressure needs as many readings in a row over target. One
	// reading is never an emergency: a canary probe that queued behind
	// one commit, or one session more on few cores, is not evidence that
	// the pressure is real and sustained. Defaults to 2; at least 2.
	EmergencyReadings int

	// CriticalWindow is how many consecutive samples at or past a
	// critical level pause everything. Defaults to 3.
	CriticalWindow int
	// ResumeLevel is the fraction of the critical level the signal must
	// stay under to resume (for connection_headroom, the free fraction
	// must stay over critical divided by it). Defaults to 0.5.
	ResumeLevel float64
	// QuietPeriod is how long a signal must stay under its resume level
	// before a critical pause ends. It doubles with each earlier critical
	// pause in the last LatchWindow. Defaults to 30s.
	QuietPeriod time.Duration
	// LatchAfter is the number of critical pauses within LatchWindow that
	// latches: the last one lasts until a person resumes. Defaults to 3.
	LatchAfter int
	// LatchWindow defaults to 1h.
	LatchWindow time.Duration
	// SlowStart is the fraction of the budget before a pause (critical,
	// stale, or a hold) that work restarts at, and of its share that a
	// job joining a running controller starts at. Defaults to 0.25.
	SlowStart float64

	// MaxErrorFraction is the share of failed batches over ErrorWindow
	// above which the budget is cut. Defaults to 0.05.
	MaxErrorFraction float64
	// ErrorWindow defaults to 10s.
	ErrorWindow time.Duration
	// MinErrorBatches is how many batches ErrorWindow must hold before
	// their error fraction counts. Defaults to 20.
	MinErrorBatches int
	// BreachMemory is how long the budget at which a breach happened caps
	// growth to ProbeGrowth. Defaults to 10m.
	BreachMemory time.Duration
	// ProbeAfter is how long the signals must stay under target after a
	// breach before growth probes past the budget that breached. Defaults
	// to 20s.
	ProbeAfter time.Duration

	// PreviousBudget is the budget a previous leader last published, for a
	// controller taking over: it starts at SlowStart of it and doubles back
	// toward it, never at the old rate. It never starts below
	// min(PreviousBudget, InitialBudget), and a budget under InitialBudget
	// is raised to it at the first step that finds every rule's signal
	// fresh and far under target: what cut the previous budget is gone.
	// So leaders that follow each other quickly cannot ratchet the budget
	// down by SlowStart each. 0 means none (start at InitialBudget).
	PreviousBudget float64
	// Inherited, when set, is the critical pause a previous leader was in:
	// a controller taking over stays in it (latched if it was) and ends it
	// only as any critical pause ends, so a failover never resumes work.
	Inherited *CriticalState

	// Holds, when set, is asked every tick which holds apply to each job.
	// A hold with a Ratio scales the job instead of pausing it.
	Holds HoldSource
	// ScaleAtWorkers leaves ratio holds to the workers, which scale their
	// own leases by every hold they know (a coordinated leader's
	// allocations are unscaled, so no hold is applied twice).
	ScaleAtWorkers bool

	// External are the signals of the sampler's configuration, beyond
	// the built-in ones, that Rules may name: the Prometheus signals
	// (signals.PrometheusConfig). Each is a valid name (signals.ValidName),
	// no built-in signal and none of the other words of a job's why
	// (status.Whys): pass them to status.WhyOf, and a job such a signal
	// limits counts under the signal's name. A rule on one that is never
	// sampled reads "not sampled": unknown, and a required rule stops the
	// work.
	// throttled.Open adds the Prometheus signals of its Options.Signals.
	External []signals.Name

	// JobRules are rules that bind jobs one at a time, as gates (see
	// gates.go): a job whose gate signal reads over Target, or cannot be
	// read or is older than MaxAge, is paused with status.CodeGated, and
	// the other jobs share the budget. Target may be 0 (vacuum_running: any
	// vacuum on the job's tables); Critical must be 0, and a gate always
	// fails closed (Required is implied). None by default.
	JobRules map[signals.Name]Rule
	// GateHold is how long a gate stays shut after its signal last read
	// over target. Defaults to DefaultGateHold.
	GateHold time.Duration
}

// CriticalState is a critical pause as a leader publishes it, for the
// next one to take over.
type CriticalState struct {
	// Signal is the signal that began it, such as primary_load.
	Signal status.Binding
	Since  time.Time
	// Value is the reading that began it and Threshold the critical level
	// it reached; Threshold 0 means neither is known (a leader that did
	// not publish them).
	Value, Threshold float64
	// QuietSince is when the signals last went quiet during the pause
	// (zero while they are not): a controller taking over counts the
	// quiet period on from it if its own first readings are quiet too.
	QuietSince time.Time
	// Latched: only a person ends it.
	Latched bool
	// Budget is the budget before the pause, for the slow start after it.
	Budget float64
}

// HoldSource reports the holds that apply to a job, named as a string, at
// an instant. [hold.Local] and [hold.Windows] are two; the cluster's
// durable holds (package holds' Watcher) are another.
type HoldSource interface {
	Applying(now time.Time, job string) []hold.Hold
}

var _ HoldSource = (*hold.Local)(nil)

// Default rules.
var defaultRules = map[signals.Name]Rule{
	signals.PrimaryLoad:        {Target: 0.7, Critical: 1.0, Required: true},
	signals.ConnectionHeadroom: {Target: 0.10, Critical: 0.05, Required: true},
	signals.ReplicaLagSeconds:  {Target: 2},
}

// DefaultForegroundLatencyRule is the rule on foreground_latency that
// throttled.Open adds where the canary can run and no rule names the
// signal: keep a canary commit's latency within 1.1 times its job-free
// baseline, and stop work while it cannot be read. A rule, not a default
// of Config: whether a canary runs is the sampler's to know, not the
// controller's.
//
// 1.1, not a looser ratio: the canary's mean commit latency stretches
// less than the foreground's p99 does. In replay runs the hypervisor left
// alone (`throttled bench replay --foreground-target`), adaptive's p99
// read 2.39 times foreground alone's in surge at 1.3 and 0.82 times at
// 1.1, and 1.5-1.9 times against 1.17 times in 2026-09-13; it cleaned
// fewer rows at 1.1.
var DefaultForegroundLatencyRule = Rule{Target: 1.1, Required: true}

// CheckForegroundTarget checks a foreground_latency target given by a
// person (a flag, an option): a multiple of the job-free latency, above
// 1 and at most 100. The error reads after the setting's name.
func CheckForegroundTarget(t float64) error {
	if t > 1 && t <= 100 {
		return nil
	}
	return fmt.Errorf("is a multiple of the baseline latency above 1, such as 1.3, got %v", t)
}

// DefaultRules returns a copy of the default rules.
func DefaultRules() map[signals.Name]Rule { return maps.Clone(defaultRules) }

// ruleSignals are the signals a rule may name.
var ruleSignals = status.RuleSignals()

// ruleOrder is the order rules are read in: the built-in signals', then
// the operator's own, by name.
func (c *Config) ruleOrder() []signals.Name {
	out := slices.Clone(ruleSignals)
	for _, n := range slices.Sorted(maps.Keys(c.Rules)) {
		if !slices.Contains(ruleSignals, n) {
			out = append(out, n)
		}
	}
	return out
}

// lowerIsWorse reports whether a rule on name is on a level to stay over.
func lowerIsWorse(name signals.Name) bool { return name == signals.ConnectionHeadroom }

// perReplica reports whether name has one sample per replica.
func perReplica(name signals.Name) bool {
	return name == signals.ReplicaLagBytes || name == signals.ReplicaLagSeconds || name == signals.ReplicaReplayBacklogBytes
}

// MaxAgeOf is the max age the controller judges signal name's samples by
// under c: its rule's (c.Rules, else the default rule), with the default
// filled; false when no rule reads it.
func (c Config) MaxAgeOf(name signals.Name) (time.Duration, bool) {
	r, ok := c.Rules[name]
	if !ok {
		if r, ok = defaultRules[name]; !ok {
			return 0, false
		}
	}
	return cmp.Or(r.MaxAge, signals.DefaultMaxAge), true
}

func (c *Config) fill() {
	rules := DefaultRules()
	maps.Copy(rules, c.Rules)
	c.Rules = rules
	for n, r := range c.Rules {
		r.MaxAge = cmp.Or(r.MaxAge, signals.DefaultMaxAge)
		c.Rules[n] = r
	}
	c.JobRules = maps.Clone(c.JobRules)
	for n, r := range c.JobRules {
		r.MaxAge, r.Required = cmp.Or(r.MaxAge, signals.DefaultMaxAge), true
		c.JobRules[n] = r
	}
	c.GateHold = cmp.Or(c.GateHold, DefaultGateHold)
	c.Tick = cmp.Or(c.Tick, time.Second)
	c.MaxBudget = cmp.Or(c.MaxBudget, 100)
	c.MinBudget = cmp.Or(c.MinBudget, c.MaxBudget/1000)
	c.InitialBudget = cmp.Or(c.InitialBudget, c.MaxBudget/10)
	c.GrowBelow = cmp.Or(c.GrowBelow, 0.95)
	c.GrowEvery = cmp.Or(c.GrowEvery, 3)
	c.MaxGrowth = cmp.Or(c.MaxGrowth, 1.25)
	c.ProbeGrowth = cmp.Or(c.ProbeGrowth, 1.02)
	c.MinUtilization = cmp.Or(c.MinUtilization, 0.8)
	c.MaxCut = cmp.Or(c.MaxCut, 0.5)
	c.EmergencyPressure = cmp.Or(c.EmergencyPressure, 1.3)
	c.EmergencyCut = cmp.Or(c.EmergencyCut, 0.75)
	c.CriticalWindow = cmp.Or(c.CriticalWindow, 3)
	c.ResumeLevel = cmp.Or(c.ResumeLevel, 0.5)
	c.QuietPeriod = cmp.Or(c.QuietPeriod, 30*time.Second)
	c.LatchAfter = cmp.Or(c.LatchAfter, 3)
	c.LatchWindow = cmp.Or(c.LatchWindow, time.Hour)
	c.SlowStart = cmp.Or(c.SlowStart, 0.25)
	c.MaxErrorFraction = cmp.Or(c.MaxErrorFraction, 0.05)
	c.ErrorWindow = cmp.Or(c.ErrorWindow, 10*time.Second)
	c.MinErrorBatches = cmp.Or(c.MinErrorBatches, 20)
	c.BreachMemory = cmp.Or(c.BreachMemory, 10*time.Minute)
	c.ProbeAfter = cmp.Or(c.ProbeAfter, 20*time.Second)
	c.EmergencyReadings = cmp.Or(c.EmergencyReadings, 2)
}

func (c *Config) validate() error {
	p := &problems{}
	c.checkRules(p)
	c.checkJobRules(p)
	c.checkBudgets(p)
	c.checkEmergency(p)
	c.checkCountsAndTimes(p)
	return errors.Join(p.errs...)
}

// problems collects what validate finds, every one, in order.
type problems struct{ errs []error }

func (p *problems) bad(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("throttle: "+format, args...))
}

// checkRules checks each cluster rule: a known signal, a target and a
// critical level on the right sides of each other, and readings it can
// use.
func (c *Config) checkRules(p *problems) {
	bad := p.bad
	for _, name := range slices.Sorted(maps.Keys(c.Rules)) {
		r := c.Rules[name]
		if !slices.Contains(ruleSignals, name) && !c.external(name) {
			bad("Rules[%q]: unknown signal; rules may name %v, or one of External (a Prometheus signal)", name, ruleSignals)
			continue
		}
		if !(r.Target > 0) || !finite(r.Target) {
			bad("Rules[%q].Target must be positive, got %v", name, r.Target)
		}
		if r.Critical < 0 || !finite(r.Critical) {
			bad("Rules[%q].Critical must not be negative, got %v", name, r.Critical)
		}
		if r.Critical > 0 {
			if lowerIsWorse(name) && r.Critical >= r.Target {
				bad("Rules[%q]: Critical %v must be below Target %v (it is a level to stay over)", name, r.Critical, r.Target)
			}
			if !lowerIsWorse(name) && r.Critical <= r.Target {
				bad("Rules[%q]: Target %v must be below Critical %v", name, r.Target, r.Critical)
			}
		}
		if lowerIsWorse(name) && r.Critical > 0 && c.ResumeLevel > 0 && r.Critical/c.ResumeLevel >= 1 {
			bad("Rules[%q]: Critical %v / ResumeLevel %v = %v free would be needed to resume, more than every slot", name, r.Critical, c.ResumeLevel, r.Critical/c.ResumeLevel)
		}
		if r.ratio(name) && r.Target <= 1 && r.Target > 0 {
			of := "level"
			if name == signals.ForegroundLatency {
				of = "latency"
			}
			bad("Rules[%q].Target is a multiple of the %s without jobs and must be above 1, such as 1.3; got %v", name, of, r.Target)
		}
		if lowerIsWorse(name) && r.Target >= 1 {
			bad("Rules[%q].Target is a free fraction of client slots and must be under 1, got %v", name, r.Target)
		}
		if r.MaxAge < 0 {
			bad("Rules[%q].MaxAge must not be negative, got %s", name, r.MaxAge)
		}
		if r.Resolution < 0 || !finite(r.Resolution) {
			bad("Rules[%q].Resolution must be a step of the reading or 0, got %v", name, r.Resolution)
		}
	}
}

// checkJobRules checks each job rule, the gates' hold and the replicas'
// policies.
func (c *Config) checkJobRules(p *problems) {
	bad := p.bad
	for _, n := range c.External {
		switch {
		case !signals.ValidName(n):
			bad("External[%q]: want lower case letters, digits and '_', starting with a letter, and no built-in signal's name", n)
		case slices.Contains(status.Whys(), status.Why(n)):
			bad("External[%q]: the name is a word of a job's why (status.Whys): it would read as that in the why label of throttled_jobs_state and throttled_jobs_limited_seconds_total; choose another", n)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.JobRules)) {
		r := c.JobRules[name]
		if why := gateSignal(name); why != "" {
			bad("JobRules[%q]: %s", name, why)
			continue
		}
		if _, ok := c.Rules[name]; ok {
			bad("JobRules[%q]: also a cluster rule (Rules); a signal binds every job or jobs one by one, not both", name)
		}
		if !(r.Target >= 0) || !finite(r.Target) {
			bad("JobRules[%q].Target must not be negative, got %v", name, r.Target)
		}
		if r.Critical != 0 {
			bad("JobRules[%q].Critical must be 0: a job rule pauses its own jobs; a level that should pause every job belongs in Rules", name)
		}
		if r.MaxAge < 0 {
			bad("JobRules[%q].MaxAge must not be negative, got %s", name, r.MaxAge)
		}
	}
	if c.GateHold < 0 {
		bad("GateHold must not be negative, got %s", c.GateHold)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Replicas)) {
		switch p := c.Replicas[name]; p {
		case ReplicaRequired, ReplicaOptional, ReplicaIgnored:
		default:
			bad("Replicas[%q]: policy %q; want required, optional or ignored", name, p)
		}
	}
}

// checkBudgets checks the budget's bounds, growth and cuts: positive,
// ordered, and fractions under 1.
func (c *Config) checkBudgets(p *problems) {
	bad := p.bad
	positive := []struct {
		name string
		v    float64
	}{
		{"MaxBudget", c.MaxBudget}, {"MinBudget", c.MinBudget}, {"InitialBudget", c.InitialBudget},
		{"GrowBelow", c.GrowBelow}, {"MaxGrowth", c.MaxGrowth}, {"ProbeGrowth", c.ProbeGrowth},
		{"MinUtilization", c.MinUtilization}, {"MaxCut", c.MaxCut}, {"EmergencyPressure", c.EmergencyPressure},
		{"EmergencyCut", c.EmergencyCut}, {"ResumeLevel", c.ResumeLevel}, {"SlowStart", c.SlowStart},
		{"MaxErrorFraction", c.MaxErrorFraction},
	}
	for _, f := range positive {
		if !(f.v > 0) || !finite(f.v) {
			bad("%s must be positive, got %v", f.name, f.v)
		}
	}
	switch {
	case c.MinBudget > c.MaxBudget:
		bad("MinBudget %v must not exceed MaxBudget %v", c.MinBudget, c.MaxBudget)
	case c.PreviousBudget < 0 || math.IsNaN(c.PreviousBudget) || math.IsInf(c.PreviousBudget, 0):
		bad("PreviousBudget must be a budget or 0, got %v", c.PreviousBudget)
	case c.InitialBudget < c.MinBudget || c.InitialBudget > c.MaxBudget:
		bad("InitialBudget %v must lie within MinBudget %v and MaxBudget %v", c.InitialBudget, c.MinBudget, c.MaxBudget)
	}
	// Fractions: at most 1 where 1 makes sense, else under 1.
	for _, f := range []struct {
		name      string
		v         float64
		inclusive bool
	}{
		{"GrowBelow", c.GrowBelow, false}, {"MaxCut", c.MaxCut, false}, {"EmergencyCut", c.EmergencyCut, false},
		{"ResumeLevel", c.ResumeLevel, false}, {"MaxErrorFraction", c.MaxErrorFraction, false},
		{"SlowStart", c.SlowStart, true}, {"MinUtilization", c.MinUtilization, true},
	} {
		if f.v > 1 || (f.v == 1 && !f.inclusive) {
			bad("%s is a fraction and must be under 1, got %v", f.name, f.v)
		}
	}
	if c.MaxGrowth <= 1 || c.ProbeGrowth <= 1 {
		bad("MaxGrowth %v and ProbeGrowth %v must be above 1", c.MaxGrowth, c.ProbeGrowth)
	}
	if c.ProbeGrowth > c.MaxGrowth {
		bad("ProbeGrowth %v must not exceed MaxGrowth %v", c.ProbeGrowth, c.MaxGrowth)
	}
	if c.EmergencyPressure <= 1 {
		bad("EmergencyPressure must be above 1, got %v", c.EmergencyPressure)
	}
}

// checkEmergency checks that an emergency cut comes before every rule's
// critical pause.
func (c *Config) checkEmergency(p *problems) {
	bad := p.bad
	for _, name := range slices.Sorted(maps.Keys(c.Rules)) {
		r := c.Rules[name]
		if r.Critical <= 0 || !(r.Target > 0) {
			continue
		}
		if cp := pressure(name, r.ratio(name), r.Critical, r.Target); c.EmergencyPressure >= cp {
			bad("EmergencyPressure %v must be below Rules[%q]'s critical pressure %.3g (critical %v over target %v): the emergency cut must come before a critical pause",
				c.EmergencyPressure, name, cp, r.Critical, r.Target)
		}
	}
}

// checkCountsAndTimes checks the counts and durations: at least 1, and
// positive.
func (c *Config) checkCountsAndTimes(p *problems) {
	bad := p.bad
	for _, f := range []struct {
		name string
		v    int
	}{{"GrowEvery", c.GrowEvery}, {"CriticalWindow", c.CriticalWindow}, {"LatchAfter", c.LatchAfter}, {"MinErrorBatches", c.MinErrorBatches}} {
		if f.v < 1 {
			bad("%s must be at least 1, got %d", f.name, f.v)
		}
	}
	if c.EmergencyReadings < 2 {
		bad("EmergencyReadings must be at least 2 (one reading is never an emergency), got %d", c.EmergencyReadings)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Tick", c.Tick}, {"QuietPeriod", c.QuietPeriod}, {"LatchWindow", c.LatchWindow}, {"ErrorWindow", c.ErrorWindow}, {"BreachMemory", c.BreachMemory}, {"ProbeAfter", c.ProbeAfter}} {
		if f.v <= 0 {
			bad("%s must be positive, got %s", f.name, f.v)
		}
	}
}

// Validate reports what is wrong with j: its name, a weight that is not a
// positive number, negative or inconsistent rate limits.
func (j JobConfig) Validate() error { return j.validate() }

func (j JobConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("throttle: job %q: "+format, append([]any{j.Name}, args...)...))
	}
	if err := j.Name.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, p := range jobname.LimitProblems(j.Weight, j.MinRate, j.MaxRate, jobname.LimitNames{Weight: "Weight", MinRate: "MinRate", MaxRate: "MaxRate"}) {
		bad("%s", p)
	}
	for i, t := range j.Tables {
		if t == "" || t != signals.TableName(t) {
			bad("Tables[%d] %q: want schema.table as the catalog names it (%q)", i, t, signals.TableName(t))
		}
	}
	for i, n := range j.Signals {
		if why := gateSignal(n); why != "" {
			bad("Signals[%d] %q: %s", i, n, why)
		}
	}
	return errors.Join(errs...)
}
