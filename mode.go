package throttled

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/internal/pacing"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// mode.go: how a Client paces its jobs, solo or coordinated. The Client
// holds one mode; coordinated mode itself lives in internal/coord.

// DefaultLease is how long a published allocation stays valid, at the
// least (three ticks when that is longer).
const DefaultLease = coord.DefaultLease

// JobPacer is what the Client hands out per job: permission for one batch
// (jobs.Pacer, and jobs.Allower without waiting), feedback after it, and
// why the job is held back (status.Explainer: its state, reason code and
// text, binding signal, rate and the holds that apply).
type JobPacer interface {
	jobs.Pacer
	jobs.Allower
	status.Explainer
}

// mode is how a Client paces its jobs: solo, deciding in this process,
// or coordinated, as a worker of the cluster's leader.
type mode interface {
	// pacer registers a validated job and returns its pacer.
	pacer(cfg jobs.Config, jc throttle.JobConfig) (JobPacer, error)
	// update changes a registered job's weight and rate limits.
	update(cfg jobs.Config, jc throttle.JobConfig) error
	remove(j status.Job) error
	// reconfigure replaces a validated controller configuration.
	reconfigure(cfg throttle.Config) error
	leader() bool
	status(j status.Job) status.JobStatus
	resumeLatched(ctx context.Context, actor, reason string) error
	// close stops every pacer: nothing is allowed after it.
	close()
}

// solo decides in this process: its controller steps every tick (the
// Client's decide loop) and its limiters apply each decision.
type solo struct{ c *Client }

func (m solo) pacer(_ jobs.Config, jc throttle.JobConfig) (JobPacer, error) {
	if err := m.c.ctl.Register(jc); err != nil {
		return nil, err
	}
	return m.c.ls.Pacer(m.c.ctl, jc.Name), nil
}

func (m solo) update(_ jobs.Config, jc throttle.JobConfig) error { return m.c.ctl.Register(jc) }

func (m solo) remove(j status.Job) error {
	m.c.ls.Get(j).Pause("job removed")
	m.c.ctl.Unregister(j)
	return nil
}

func (solo) reconfigure(throttle.Config) error {
	return fmt.Errorf("throttled: Reconfigure needs Options.Coordinate")
}

func (solo) leader() bool { return true }

func (m solo) status(j status.Job) status.JobStatus { return m.c.ls.Pacer(m.c.ctl, j).Status() }

func (m solo) resumeLatched(_ context.Context, actor, _ string) error {
	if !m.c.ctl.Resume(time.Now(), actor) {
		return ErrNotLatched
	}
	return nil
}

func (m solo) close() { m.c.ls.PauseAll("throttled client closed") }

// coordinated is one worker of the cluster's leader (internal/coord).
type coordinated struct {
	c *Client
	e *coord.Engine
}

func (m coordinated) pacer(cfg jobs.Config, _ throttle.JobConfig) (JobPacer, error) {
	// The leader's controller registers the job from its worker row.
	w, err := m.e.Register(context.Background(), cfg)
	if err != nil {
		return nil, err // not a nil *worker in a non-nil Pacer
	}
	return w, nil
}

func (m coordinated) update(cfg jobs.Config, _ throttle.JobConfig) error {
	return m.e.Update(context.Background(), cfg)
}

func (m coordinated) remove(j status.Job) error { return m.e.Remove(context.Background(), j) }

func (m coordinated) reconfigure(cfg throttle.Config) error {
	m.e.Reconfigure(cfg)
	return nil
}

func (m coordinated) leader() bool { return m.e.Leader() }

func (m coordinated) status(j status.Job) status.JobStatus { return m.e.Status(j) }

func (m coordinated) resumeLatched(ctx context.Context, actor, reason string) error {
	return coord.RequestResume(ctx, m.c.store, actor, reason)
}

func (m coordinated) close() {
	m.c.ls.PauseAll("throttled client closed")
	m.e.Close()
}

// withResolution sets primary_load's Resolution to one session on CPU,
// 1/cores, unless the configuration sets it: on few cores one raw sample
// then cannot cut by the emergency share on its own for one session more.
func withResolution(cfg throttle.Config, cores float64) throttle.Config {
	if !(cores > 0) {
		return cfg
	}
	rules := maps.Clone(cfg.Rules)
	if rules == nil {
		rules = map[signals.Name]throttle.Rule{}
	}
	r, ok := rules[signals.PrimaryLoad]
	if !ok {
		r = throttle.DefaultRules()[signals.PrimaryLoad]
	}
	if r.Resolution == 0 {
		r.Resolution = 1 / cores
	}
	rules[signals.PrimaryLoad] = r
	cfg.Rules = rules
	return cfg
}

// withForegroundLatency adds throttle.DefaultForegroundLatencyRule to a
// configuration with no rule on foreground_latency.
func withForegroundLatency(cfg throttle.Config) throttle.Config {
	if _, ok := cfg.Rules[signals.ForegroundLatency]; ok {
		return cfg
	}
	rules := maps.Clone(cfg.Rules)
	if rules == nil {
		rules = map[signals.Name]throttle.Rule{}
	}
	rules[signals.ForegroundLatency] = throttle.DefaultForegroundLatencyRule
	cfg.Rules = rules
	return cfg
}

var (
	_ JobPacer = (*pacing.LimiterPacer)(nil)
	_ mode     = solo{}
	_ mode     = coordinated{}
)

// ErrNotLatched is a resume asked of a cluster in no latched critical
// pause.
var ErrNotLatched = coord.ErrNotLatched

// ResumeLatched ends a latched critical pause as actor: at once in this
// process's controller, or, in coordinated mode, by asking the cluster's
// leader, within a tick, and auditing the request with reason.
func (c *Client) ResumeLatched(ctx context.Context, actor, reason string) error {
	return c.mode.resumeLatched(ctx, actor, reason)
}

// withPrometheus lets cfg's rules name the sampler's Prometheus signals.
func withPrometheus(cfg throttle.Config, p signals.PrometheusConfig) throttle.Config {
	if len(p.Signals) == 0 {
		return cfg
	}
	cfg.External = slices.Clone(cfg.External)
	for _, s := range p.Signals {
		if !slices.Contains(cfg.External, s.Name) {
			cfg.External = append(cfg.External, s.Name)
		}
	}
	return cfg
}
