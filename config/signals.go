package config

import (
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// buildSignals reads the signal blocks over the default rules and
// returns where each block is, for the controller's errors.
func (c *Config) buildSignals(doc *file, v *validator) map[signals.Name]hcl.Range {
	c.Rules = throttle.DefaultRules()
	c.JobRules = map[signals.Name]throttle.Rule{}
	ruleBlocks := map[signals.Name]hcl.Range{}
	for _, s := range doc.Signals {
		name := signals.Name(s.Name)
		prom := c.promSignal(name)
		if !signals.Known(name) && !c.custom(name) && prom < 0 {
			v.bad(s.Range, "signal %q: unknown; signals are %v and the custom_signal blocks and prometheus_signal blocks", s.Name, signals.Names)
			continue
		}
		if !v.first(s.Range, "signal", s.Name) {
			continue
		}
		if s.Baseline != nil && prom < 0 {
			v.bad(s.Range, "signal %q: baseline is a prometheus_signal's; this signal has its own", s.Name)
		}
		if prom >= 0 {
			ruleBlocks[name] = s.Range
			c.buildPromRule(s, prom, v)
			continue
		}
		if c.jobRule(name) {
			c.buildJobRule(s, v)
			continue
		}
		ruleBlocks[name] = s.Range
		r := throttle.Rule{Target: s.Target, MaxAge: v.duration(s.Range, "max_age", s.MaxAge, 0)}
		// An omitted critical keeps the signal's default one: a block that
		// only moves the target must not drop the auto-pause (critical = 0
		// turns it off, in so many words).
		if s.Critical != nil {
			r.Critical = *s.Critical
		} else if def, ok := c.Rules[name]; ok {
			r.Critical = def.Critical
		}
		if s.Required != nil {
			r.Required = *s.Required
		} else if def, ok := c.Rules[name]; ok {
			r.Required = def.Required
		}
		c.Rules[name] = r
	}
	// A Prometheus signal no required rule reads never keeps run from
	// starting (signals.PrometheusSignal.Optional).
	for i, ps := range c.Prometheus.Signals {
		r, ok := c.Rules[ps.Name]
		c.Prometheus.Signals[i].Optional = !ok || !r.Required
	}
	return ruleBlocks
}

// jobRule reports whether a rule on name binds jobs one by one (a gate)
// rather than the shared budget: a vacuum on the job's tables, an
// anti-wraparound vacuum, a custom signal.
func (c *Config) jobRule(name signals.Name) bool {
	return name == signals.VacuumRunning || name == signals.AntiWraparoundVacuums || c.custom(name)
}

func (c *Config) custom(name signals.Name) bool {
	return slices.ContainsFunc(c.Custom, func(x signals.CustomSignal) bool { return x.Name == name })
}

// jobRuleNames lists the job rules configured, for errors.
func (c *Config) jobRuleNames() string {
	if len(c.JobRules) == 0 {
		return "none are configured"
	}
	var names []string
	for _, n := range slices.Sorted(maps.Keys(c.JobRules)) {
		names = append(names, string(n))
	}
	return "job rules are " + strings.Join(names, ", ")
}

// buildJobRule reads a signal block on a job-scoped signal: a gate, so a
// target of 0 is allowed (vacuum_running: any vacuum), and neither a
// critical level nor required = false is.
func (c *Config) buildJobRule(s signalBlock, v *validator) {
	name := signals.Name(s.Name)
	r := throttle.Rule{Target: s.Target, MaxAge: v.duration(s.Range, "max_age", s.MaxAge, 0), Required: true}
	if !(s.Target >= 0) || math.IsInf(s.Target, 0) {
		v.bad(s.Range, "signal %q: target must be 0 or more, got %v", s.Name, s.Target)
	}
	if s.Critical != nil {
		v.bad(s.Range, "signal %q: takes no critical level: it pauses only the jobs it binds (a job's signals, its tables); a level that should pause every job is a cluster signal's", s.Name)
	}
	if s.Required != nil && !*s.Required {
		v.bad(s.Range, "signal %q: required = false: a job rule always fails closed (unknown or stale shuts the job)", s.Name)
	}
	if cs := slices.IndexFunc(c.Custom, func(x signals.CustomSignal) bool { return x.Name == name }); cs >= 0 && s.MaxAge != nil && r.MaxAge <= c.Custom[cs].Every {
		v.bad(s.Range, "signal %q: max_age %s must exceed the custom signal's every %s, or every reading is stale before the next", s.Name, r.MaxAge, c.Custom[cs].Every)
	}
	if cs := slices.IndexFunc(c.Custom, func(x signals.CustomSignal) bool { return x.Name == name }); cs >= 0 && s.MaxAge == nil {
		// A custom signal is read every `every`: by default it may be two
		// readings and a timeout old.
		r.MaxAge = 2*c.Custom[cs].Every + c.Custom[cs].Timeout
	}
	c.JobRules[name] = r
}

// buildBouncer reads the pgbouncer block.
func (c *Config) buildBouncer(doc *file, v *validator) {
	b := doc.Bouncer
	if b == nil {
		return
	}
	c.PgBouncerDSN = v.secret(b.Range, "dsn", b.DSN, b.DSNFile)
	if b.DSN == nil && b.DSNFile == nil || strings.TrimSpace(c.PgBouncerDSN) == "" {
		v.bad(b.Range, "pgbouncer: dsn (or dsn_file) is required and must not be empty: the admin console, such as postgres://throttled_monitor@pgbouncer:6432/pgbouncer")
		return
	}
	v.dsn(b.Range, "pgbouncer: dsn", c.PgBouncerDSN)
}

// buildCustom reads the custom_signal blocks.
func (c *Config) buildCustom(doc *file, v *validator) {
	for _, b := range doc.Customs {
		if !v.first(b.Range, "custom_signal", b.Name) {
			continue
		}
		cs := signals.CustomSignal{Name: signals.Name(b.Name), Query: b.Query, Source: c.at(b.Range),
			Timeout: v.duration(b.Range, "timeout", b.Timeout, signals.DefaultCustomTimeout),
			Every:   v.duration(b.Range, "every", b.Every, signals.DefaultCustomEvery)}
		if b.Unit != nil {
			cs.Unit = signals.Unit(*b.Unit)
		}
		for _, p := range cs.Problems() {
			v.bad(b.Range, "custom_signal %q: %s", b.Name, p)
		}
		c.Custom = append(c.Custom, cs)
	}
}

// checkController runs the controller's own validation, the one judge of
// the rules and budgets it takes, so no configuration it would refuse is
// ever accepted here; and it says what it refuses at the block that set
// it, in the file's words. Each signal rule is judged alone first, so a
// refusal belongs to its block; what the whole is refused for after that
// can only come from the controller block.
func (c *Config) checkController(doc *file, v *validator, ruleBlocks map[signals.Name]hcl.Range) {
	refused := false
	for _, name := range slices.Sorted(maps.Keys(ruleBlocks)) {
		r := c.Rules[name]
		_, err := throttle.New(throttle.Config{Rules: map[signals.Name]throttle.Rule{name: r}, External: c.promNames()})
		if err == nil {
			continue
		}
		refused = true
		var problems []string
		if c.promSignal(name) < 0 {
			problems = ruleProblems(name, r)
		}
		if len(problems) == 0 {
			problems = []string{err.Error()}
		}
		for _, p := range problems {
			v.bad(ruleBlocks[name], "signal %q: %s", name, p)
		}
	}
	if refused {
		return
	}
	if at, ok := ruleBlocks[signals.ForegroundLatency]; ok && c.NoForegroundLatency {
		v.bad(at, "signal %q: a rule on it, and the controller block's foreground_latency = false: one or the other", signals.ForegroundLatency)
		return
	}
	if _, err := throttle.New(c.ControllerConfig()); err != nil {
		at := doc.Primary.Range
		if doc.Control != nil {
			at = doc.Control.Range
		}
		v.bad(at, "controller: %v", err)
	}
}
