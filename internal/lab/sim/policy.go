package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// Policy paces the background jobs of a run.
type Policy interface {
	// Decide returns each job's rate (batches per second) for the next
	// tick, and the mode to show.
	Decide(now time.Time, snap signals.Snapshot) (map[status.Job]float64, string)
	// Report feeds back one batch attempt.
	Report(j status.Job, f throttle.Feedback)
	// HonoursHolds reports whether the policy itself stops held jobs;
	// the simulator gates the others.
	HonoursHolds() bool
}

// PolicyNames lists the policies in display order.
var PolicyNames = []string{"adaptive", "fixed", "lag-only", "binary", "aimd"}

// newPolicy builds the policy called name for scenario sc. fixedRate is
// used by "fixed" only.
func newPolicy(name string, sc Scenario, fixedRate float64, held func(time.Time) bool, o Options) (Policy, error) {
	switch name {
	case "adaptive":
		return newAdaptive(sc, held, o)
	case "fixed":
		return &budgetPolicy{sc: sc, budget: fixedRate, step: func(float64, signals.Snapshot) (float64, string) { return fixedRate, "fixed" }}, nil
	case "lag-only":
		// The safeguard of 2026-09-13: pace on replica lag alone.
		p := &budgetPolicy{sc: sc, budget: initBudget}
		p.step = func(b float64, snap signals.Snapshot) (float64, string) {
			lag, ok := snap.Get(signals.ReplicaLagSeconds, map[string]string{signals.LabelReplica: "replica1"})
			if ok && lag.Err == nil && lag.Value > lagTarget {
				return max(1, b/2), "throttled"
			}
			return min(maxBudget, b*1.1), "running"
		}
		return p, nil
	case "binary":
		// freno: go at full speed while every signal is under its
		// threshold, stop while any is over or unreadable.
		p := &budgetPolicy{sc: sc, budget: maxBudget}
		p.step = func(_ float64, snap signals.Snapshot) (float64, string) {
			l, ok1 := snap.Get(signals.PrimaryLoad, nil)
			lag, ok2 := snap.Get(signals.ReplicaLagSeconds, map[string]string{signals.LabelReplica: "replica1"})
			if !ok1 || !ok2 || l.Err != nil || lag.Err != nil || l.Value > target || lag.Value > lagTarget {
				return 0, "paused"
			}
			return maxBudget, "running"
		}
		return p, nil
	case "aimd":
		p := &budgetPolicy{sc: sc, budget: initBudget}
		p.step = func(b float64, snap signals.Snapshot) (float64, string) {
			l, ok := snap.Get(signals.PrimaryLoad, nil)
			if ok && l.Err == nil && l.Value > target {
				return max(1, b/2), "throttled"
			}
			return min(maxBudget, b+2), "running"
		}
		return p, nil
	}
	return nil, fmt.Errorf("sim: unknown policy %q; want one of %v", name, PolicyNames)
}

// budgetPolicy is a baseline: one total rate from a rule, shared by
// weight among the jobs that want work.
type budgetPolicy struct {
	sc     Scenario
	budget float64
	step   func(budget float64, snap signals.Snapshot) (float64, string)
	t      float64
}

func (p *budgetPolicy) Decide(now time.Time, snap signals.Snapshot) (map[status.Job]float64, string) {
	var mode string
	p.budget, mode = p.step(p.budget, snap)
	return byWeight(p.sc, p.budget, snap.At), mode
}

func (p *budgetPolicy) Report(status.Job, throttle.Feedback) {}
func (p *budgetPolicy) HonoursHolds() bool                   { return false }

// byWeight splits budget by weight among jobs with demand at now.
func byWeight(sc Scenario, budget float64, now time.Time) map[status.Job]float64 {
	t := now.Sub(epoch).Seconds()
	var total float64
	for _, j := range sc.Jobs {
		if j.Demand(t) > 0 {
			total += j.Weight
		}
	}
	out := map[status.Job]float64{}
	for _, j := range sc.Jobs {
		if j.Demand(t) > 0 {
			out[j.Name] = budget * j.Weight / total
		}
	}
	return out
}

// adaptive is throttled's controller, unchanged.
type adaptive struct {
	c *throttle.Controller
}

// simHolds holds every job while the scenario says so.
type simHolds struct{ held func(time.Time) bool }

func (h simHolds) Applying(now time.Time, _ string) []hold.Hold {
	if !h.held(now) {
		return nil
	}
	return []hold.Hold{{ID: "sim", Scope: hold.AllJobs(), Source: "manual", Reason: "scenario hold", Actor: "sim",
		Created: now, Expires: now.Add(time.Hour)}}
}

func newAdaptive(sc Scenario, held func(time.Time) bool, o Options) (*adaptive, error) {
	rules := throttle.DefaultRules()
	maps.Copy(rules, sc.Rules)
	if o.CanaryTarget > 0 {
		// As throttled.Open adds it where the canary runs: the product's
		// rule, at the target asked for.
		r := throttle.DefaultForegroundLatencyRule
		r.Target = o.CanaryTarget
		rules[signals.ForegroundLatency] = r
	}
	c, err := throttle.New(throttle.Config{
		Rules:         rules,
		Replicas:      map[string]throttle.ReplicaPolicy{"replica1": throttle.ReplicaRequired},
		MaxBudget:     maxBudget,
		InitialBudget: initBudget,
		Holds:         simHolds{held},
		MaxGrowth:     o.MaxGrowth,
		GrowEvery:     o.GrowEvery,
		BreachMemory:  o.BreachMemory,
	})
	if err != nil {
		return nil, err
	}
	for _, j := range sc.Jobs {
		if err := c.Register(throttle.JobConfig{Name: j.Name, Weight: j.Weight}); err != nil {
			return nil, err
		}
	}
	return &adaptive{c: c}, nil
}

func (a *adaptive) Decide(now time.Time, snap signals.Snapshot) (map[status.Job]float64, string) {
	d := a.c.Step(now, snap)
	out := map[status.Job]float64{}
	for j, jd := range d.Jobs {
		out[j] = jd.Rate
	}
	return out, string(d.Mode)
}

func (a *adaptive) Report(j status.Job, f throttle.Feedback) { a.c.Report(j, f) }

// wanter is a policy told which jobs want more than their rate, as the
// product's limiters tell the controller.
type wanter interface{ Wanted(j status.Job) }

func (a *adaptive) Wanted(j status.Job) { a.c.Wanted(j) }
func (a *adaptive) HonoursHolds() bool  { return true }

func sortedJobs(m map[status.Job]float64) []status.Job {
	var out []status.Job
	for j := range m {
		out = append(out, j)
	}
	slices.Sort(out)
	return out
}
