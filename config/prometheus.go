package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// promBlock is where the Prometheus signals are read (signals.PrometheusConfig).
type promBlock struct {
	Address           string    `hcl:"address"`
	Timeout           *string   `hcl:"timeout,optional"`
	BearerToken       *string   `hcl:"bearer_token,optional"`
	BearerTokenFile   *string   `hcl:"bearer_token_file,optional"`
	BasicUser         *string   `hcl:"basic_user,optional"`
	BasicPassword     *string   `hcl:"basic_password,optional"`
	BasicPasswordFile *string   `hcl:"basic_password_file,optional"`
	CAFile            *string   `hcl:"ca_file,optional"`
	BaselineWindow    *string   `hcl:"baseline_window,optional"`
	Range             hcl.Range `hcl:",def_range"`
}

// promSignalBlock is one Prometheus signal (signals.PrometheusSignal).
type promSignalBlock struct {
	Name       string    `hcl:"name,label"`
	Query      string    `hcl:"query"`
	Traffic    *string   `hcl:"traffic,optional"`
	MinTraffic *float64  `hcl:"min_traffic,optional"`
	Every      *string   `hcl:"every,optional"`
	Unit       *string   `hcl:"unit,optional"`
	Delay      *string   `hcl:"delay,optional"`
	Range      hcl.Range `hcl:",def_range"`
}

// Sane bounds of a Prometheus signal's durations.
const (
	maxPromTimeout = 30 * time.Second // Argo Rollouts' own; Flagger's is 5s, KEDA's 3s
	maxPromEvery   = time.Minute      // a pacing signal read less often cannot pace
)

// PrometheusSignals are the Prometheus signals of a file, where they are
// read and how.
type PrometheusSignals struct{ signals.PrometheusConfig }

// restartForm is the configuration without the lines its blocks are at:
// moving a block is no change.
func (p PrometheusSignals) restartForm() any {
	c := p.PrometheusConfig
	c.Signals = slices.Clone(c.Signals)
	for i := range c.Signals {
		c.Signals[i].Source = ""
	}
	return c
}

// buildPrometheus reads the prometheus block and the prometheus_signal
// blocks: complete, and their durations sane. The signal blocks that
// bind them (baseline, max_age) are read by buildSignals.
func (c *Config) buildPrometheus(doc *file, v *validator) {
	p := doc.Prom
	if p == nil {
		for _, b := range doc.PromSignals {
			v.bad(b.Range, "prometheus_signal %q: no prometheus block says where to read it (prometheus { address = \"http://127.0.0.1:9090\" })", b.Name)
		}
		return
	}
	if len(doc.PromSignals) == 0 {
		v.bad(p.Range, "prometheus: no prometheus_signal block: it would read nothing")
	}
	cfg := signals.PrometheusConfig{Address: p.Address,
		Timeout:        v.duration(p.Range, "prometheus: timeout", p.Timeout, signals.DefaultPrometheusTimeout),
		BaselineWindow: v.duration(p.Range, "prometheus: baseline_window", p.BaselineWindow, signals.DefaultPrometheusBaselineWindow),
		BearerToken:    v.secret(p.Range, "bearer_token", p.BearerToken, p.BearerTokenFile),
		BasicPassword:  v.secret(p.Range, "basic_password", p.BasicPassword, p.BasicPasswordFile),
	}
	if p.BasicUser != nil {
		cfg.BasicUser = *p.BasicUser
	}
	if p.CAFile != nil {
		cfg.CAFile = *p.CAFile
	}
	if cfg.Timeout > maxPromTimeout {
		v.bad(p.Range, "prometheus: timeout %s: at most %s; a pacing signal slower than that is blind", cfg.Timeout, maxPromTimeout)
	}
	for _, b := range doc.PromSignals {
		if !v.first(b.Range, "prometheus_signal", b.Name) {
			continue
		}
		s := signals.PrometheusSignal{Name: signals.Name(b.Name), Query: b.Query, Source: c.at(b.Range),
			Every: v.duration(b.Range, "every", b.Every, signals.DefaultPrometheusEvery),
			Delay: v.duration(b.Range, "delay", b.Delay, signals.DefaultPrometheusDelay)}
		if b.Traffic != nil {
			s.Traffic = *b.Traffic
			if strings.TrimSpace(s.Traffic) == "" {
				v.bad(b.Range, "prometheus_signal %q: traffic is empty; leave it out for none", b.Name)
			}
		}
		if b.MinTraffic != nil {
			s.MinTraffic = *b.MinTraffic
		}
		if b.Unit != nil {
			s.Unit = signals.Unit(*b.Unit)
		}
		if s.Every > maxPromEvery {
			v.bad(b.Range, "prometheus_signal %q: every %s: at most %s; a pacing signal read less often cannot pace", b.Name, s.Every, maxPromEvery)
		}
		if 2*s.Delay > cfg.BaselineWindow {
			v.bad(b.Range, "prometheus_signal %q: delay %s: the prometheus block's baseline_window %s must be at least twice it, or measuring the baseline costs the jobs half their time", b.Name, s.Delay, cfg.BaselineWindow)
		}
		// The controller's own judge of an external signal's name (no
		// word of a job's why), said here at its block.
		if _, err := throttle.New(throttle.Config{External: []signals.Name{s.Name}}); err != nil && s.Problems() == nil {
			v.bad(b.Range, "prometheus_signal %q: %v", b.Name, err)
			continue
		}
		if c.custom(s.Name) {
			v.bad(b.Range, "prometheus_signal %q: a custom_signal has that name", b.Name)
		}
		for _, problem := range s.Problems() {
			v.bad(b.Range, "prometheus_signal %q: %s", b.Name, problem)
		}
		cfg.Signals = append(cfg.Signals, s)
	}
	// What the signals' own checks left: the address and the credentials.
	probe := cfg
	probe.Signals = nil
	if len(cfg.Signals) > 0 {
		probe.Signals = cfg.Signals[:1]
	}
	for _, problem := range probe.Problems() {
		if !strings.HasPrefix(problem, "prometheus signal ") {
			v.bad(p.Range, "prometheus: %s", problem)
		}
	}
	c.Prometheus = PrometheusSignals{cfg}
}

// promSignal returns the index of the Prometheus signal name, or -1.
func (c *Config) promSignal(name signals.Name) int {
	return slices.IndexFunc(c.Prometheus.Signals, func(x signals.PrometheusSignal) bool { return x.Name == name })
}

// buildPromRule reads a signal block on a Prometheus signal: its
// baseline (job-free by default: the target is a ratio above 1), a
// critical level if given, required unless it says otherwise, and a
// max_age that exceeds the signal's every.
func (c *Config) buildPromRule(s signalBlock, i int, v *validator) {
	ps := &c.Prometheus.Signals[i]
	ps.Baseline = signals.BaselineJobFree
	if s.Baseline != nil {
		ps.Baseline = signals.Baseline(*s.Baseline)
		if ps.Baseline != signals.BaselineJobFree && ps.Baseline != signals.BaselineNone {
			v.bad(s.Range, "signal %q: baseline = %q: want %q (a ratio over the level while no job works) or %q (an absolute target)", s.Name, *s.Baseline, signals.BaselineJobFree, signals.BaselineNone)
		}
	}
	// By default the data may be two readings, a query and a default
	// scrape interval (15s) old.
	def := 2*ps.Every + c.Prometheus.Timeout + 15*time.Second
	r := c.Rules[s.name()]
	r.Target, r.Ratio, r.Required, r.MaxAge = s.Target, ps.JobFree(), true, v.duration(s.Range, "max_age", s.MaxAge, def)
	if s.Critical != nil {
		r.Critical = *s.Critical
	}
	if s.Required != nil {
		r.Required = *s.Required
	}
	if s.MaxAge != nil && r.MaxAge <= ps.Every {
		v.bad(s.Range, "signal %q: max_age %s must exceed the prometheus_signal's every %s, or every reading is stale before the next", s.Name, r.MaxAge, ps.Every)
	}
	c.Rules[s.name()] = r
}

func (s signalBlock) name() signals.Name { return signals.Name(s.Name) }

// promNames are the Prometheus signals' names, for the controller's
// External.
func (c *Config) promNames() []signals.Name {
	var out []signals.Name
	for _, s := range c.Prometheus.Signals {
		out = append(out, s.Name)
	}
	return out
}

// promErr names the place of the prometheus block, for Live's errors.
func (c *Config) promErr(err error) error {
	return fmt.Errorf("config: %s: prometheus: %w", c.at(c.places.prom), err)
}
