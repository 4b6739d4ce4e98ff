// Package throttled paces background jobs against a PostgreSQL primary's
// health. This package is the convenience that wires the parts in one
// process: it samples the primary ([signals]), decides once a second
// ([throttle.Controller]), applies each decision to every job's token
// bucket and pause gate ([throttle.Limiters]), and hands out paced jobs
// ([jobs.Job]):
//
//	c, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: monitorDSN, Cores: 16})
//	job, err := c.Job(jobs.Config{Name: "purge_sessions", Checkpoint: true}, pool, batch)
//	err = job.Run(ctx)
package throttled

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// Options configure [Open].
type Options struct {
	// PrimaryDSN, ReplicaDSNs and Cores are as in signals.Config. The
	// primary's role needs pg_monitor. PrimaryDSN and Cores are required.
	PrimaryDSN  string
	ReplicaDSNs []string
	Cores       float64
	// Signals tunes sampling; its DSN and core fields are overridden by
	// the ones above.
	Signals signals.Config
	// Controller tunes pacing (rules, replica policies, budget, ...).
	// Holds defaults to the Client's own in-process holds.
	Controller throttle.Config
	// Logger defaults to a null logger.
	Logger hclog.Logger
}

// Client runs the sampler and the controller in this process and paces
// the jobs it hands out. Its methods are safe for concurrent use.
type Client struct {
	poller *signals.Poller
	ctl    *throttle.Controller
	ls     *throttle.Limiters
	holds  *throttle.Holds
	log    hclog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	last throttle.Decision
	subs []chan throttle.Decision
}

// Open connects to the primary (and replicas), checks the sampling role,
// and starts sampling and deciding until Close. No job may start a batch
// before the first decision.
func Open(ctx context.Context, opts Options) (*Client, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	scfg := opts.Signals
	scfg.PrimaryDSN, scfg.ReplicaDSNs, scfg.Cores = opts.PrimaryDSN, opts.ReplicaDSNs, opts.Cores
	scfg.Logger = cmp.Or[hclog.Logger](scfg.Logger, log.Named("signals"))
	poller, err := signals.New(scfg)
	if err != nil {
		return nil, err
	}
	holds, err := throttle.NewHolds(throttle.HoldsConfig{})
	if err != nil {
		return nil, err
	}
	ccfg := opts.Controller
	if ccfg.Holds == nil {
		ccfg.Holds = holds
	}
	ctl, err := throttle.New(ccfg)
	if err != nil {
		return nil, err
	}
	if err := poller.Connect(ctx); err != nil {
		poller.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Client{poller: poller, ctl: ctl, ls: throttle.NewLimiters(nil), holds: holds, log: log.Named("controller"), cancel: cancel}
	c.wg.Go(func() { _ = poller.Run(runCtx) })
	c.wg.Go(func() { c.decide(runCtx) })
	return c, nil
}

// decide steps the controller every tick and applies each decision.
func (c *Client) decide(ctx context.Context) {
	t := time.NewTicker(c.ctl.Config().Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		snap := c.poller.Snapshot()
		d := c.ctl.Step(snap.At, snap)
		c.ls.Apply(d)
		for _, e := range d.Events {
			if e.Page() {
				c.log.Error("page", "event", e.Kind, "signal", e.Signal, "value", e.Value, "threshold", e.Threshold, "message", e.Message)
			} else {
				c.log.Warn("mode change", "event", e.Kind, "message", e.Message)
			}
		}
		c.mu.Lock()
		if d.Mode != c.last.Mode {
			c.log.Info("mode", "mode", d.Mode, "reason", d.Reason)
		}
		c.last = d
		for _, ch := range c.subs {
			select {
			case ch <- d:
			default: // a slow reader misses a decision, never blocks the controller
			}
		}
		c.mu.Unlock()
	}
}

// Job registers a job with the controller and returns it, paced. db and
// fn may be nil for a job driven through jobs.Job.Acquire.
func (c *Client) Job(cfg jobs.Config, db jobs.DB, fn jobs.BatchFunc) (*jobs.Job, error) {
	p, err := c.Pacer(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = c.log.Named("jobs")
	}
	return jobs.New(cfg, db, p, fn)
}

// Pacer registers a job with the controller and returns its pacer, for
// callers that take tokens themselves (pacer.Wait before each batch, the
// returned function after it) or hand it to the River middleware.
func (c *Client) Pacer(cfg jobs.Config) (*throttle.Pacer, error) {
	name := throttle.Job(cfg.Name)
	if err := name.Validate(); err != nil {
		return nil, err
	}
	if err := c.ctl.Register(throttle.JobConfig{Name: name, Weight: cfg.Weight, MinRate: cfg.MinRate, MaxRate: cfg.MaxRate}); err != nil {
		return nil, err
	}
	return c.ls.Pacer(c.ctl, name), nil
}

// Decision returns the latest decision.
func (c *Client) Decision() throttle.Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Decisions returns a channel that receives every decision from now on
// (dropping those a slow reader has no room for), until Close.
func (c *Client) Decisions() <-chan throttle.Decision {
	ch := make(chan throttle.Decision, 4)
	c.mu.Lock()
	c.subs = append(c.subs, ch)
	c.mu.Unlock()
	return ch
}

// Holds is the client's in-process holds: a hold added here pauses its
// jobs at the next tick.
func (c *Client) Holds() *throttle.Holds { return c.holds }

// Controller is the client's controller.
func (c *Client) Controller() *throttle.Controller { return c.ctl }

// Snapshot is the latest sample of every signal.
func (c *Client) Snapshot() signals.Snapshot { return c.poller.Snapshot() }

// Close stops deciding and sampling. Jobs waiting for permission stay
// blocked until their context ends: nothing is allowed after Close.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	for _, ch := range c.subs {
		close(ch)
	}
	c.subs = nil
	c.mu.Unlock()
	// Close every gate: a decision that can no longer be renewed must not
	// keep work flowing.
	c.ls.PauseAll("throttled client closed")
	return nil
}
