// Package throttled paces background jobs against a PostgreSQL primary's
// health. This package is the convenience that wires the parts in one
// process: it samples the primary ([signals]), decides once a second
// ([throttle.Controller]), applies each decision to every job's token
// bucket and pause gate, and hands out paced jobs ([jobs.Job]):
//
//	c, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: monitorDSN, Cores: 16})
//	job, err := c.Job(jobs.Config{Name: "purge_sessions", Checkpoint: true}, pool, batch)
//	err = job.Run(ctx)
package throttled

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/internal/pacing"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
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
	// Its Holds, when set, add to the Client's own.
	Controller throttle.Config
	// NoForegroundLatency turns off pacing on the foreground's latency.
	// By default, when Controller.Rules has no rule on
	// foreground_latency, Open turns the canary on (signals.Config
	// ForegroundLatency) and, where it can run (throttled.canary exists
	// and the sampling role may write it: `throttled migrate`), adds
	// throttle.DefaultForegroundLatencyRule; where it cannot, the jobs
	// are paced without it and the log says why
	// ([Client.ForegroundLatency] too). A rule in Controller.Rules turns
	// it on whatever this says, and a canary that cannot run then fails
	// Open. Setting both is an error.
	NoForegroundLatency bool
	// CoordinationDSN, when set, names the database whose throttled
	// schema holds the durable pauses and the audit log (normally the
	// primary, as a role that may write that schema). A hold made there by
	// any process or by `throttled pause` reaches this one within the
	// second; while this process cannot confirm the holds, its jobs stop.
	// Open creates the schema if needed.
	CoordinationDSN string
	// Holds sets the durable holds' default lifetime and, optionally, a
	// maximum of this process's own. It cannot raise the cluster's cap
	// (holds.Store.SetTTL, written by `throttled run`), which the
	// database enforces on every hold.
	Holds holds.Config
	// Enforce, when set (and CoordinationDSN is), checks every 2 s for
	// job sessions working under a hold, audits them and, if configured,
	// cancels them.
	Enforce *holds.EnforcerConfig
	// OnEnforce, when set, receives every enforcement check's violations
	// (none, when all is well), for paging.
	OnEnforce func([]holds.Violation)
	// OnPrimaryChange, when set (and CoordinationDSN is), receives the
	// audit entry this process wrote when the primary it samples is not
	// the one the audit log recorded last (a failover or switchover: from
	// which server and timeline to which), for paging. It runs on the
	// process that samples (the leader, in coordinated mode), at most once
	// a tick, and must not block.
	OnPrimaryChange func(holds.Entry)
	// Coordinate (with CoordinationDSN) makes this process one of many
	// pacing jobs against the same cluster: the processes elect one leader
	// (a session advisory lock), which alone samples and decides and
	// publishes each worker's allocation with a short lease; every process
	// heartbeats its consumption and reads its allocation. A worker whose
	// lease expires (no leader, database unreachable) stops. Sampling load
	// on the primary stays that of one process, however many there are.
	Coordinate bool
	// DeferLeadership, in coordinated mode, makes this process lead only
	// once no leader has published for this long: for a process that
	// cannot page (throttled exec sets it), so that one that can (the
	// sidecar) leads whenever one runs. 0 competes at once.
	DeferLeadership time.Duration
	// Work, when set, says when a job was last at work by means only the
	// caller knows (a sidecar's tokens out to remote workers): the zero
	// time for never, the current time while one is. The Client adds what
	// it knows itself (its own jobs' batches, and while it leads in
	// coordinated mode the batches every worker reports) and hands the
	// whole to the sampler as signals.Config.Work, so no reading taken
	// while a job works teaches a Prometheus signal its job-free baseline.
	// It must be safe for concurrent use and must not block.
	Work func() time.Time
	// Logger defaults to a null logger.
	Logger hclog.Logger
}

// Client runs the sampler and the controller in this process and paces
// the jobs it hands out. Its methods are safe for concurrent use.
type Client struct {
	poller    *signals.Poller
	ctl       *throttle.Controller
	ls        *pacing.Limiters
	holds     *hold.Local
	store     *holds.DB      // nil without CoordinationDSN
	watcher   *holds.Watcher // nil without CoordinationDSN
	coord     *pgxpool.Pool
	mode      mode       // solo, or coordinated with Options.Coordinate
	sources   unionHolds // every hold this process knows of
	durable   unionHolds // the durable and configured ones, shared by the cluster
	tick      time.Duration
	audits    chan holds.Entry
	onEnforce func([]holds.Violation)
	onPrimary func(holds.Entry)
	log       hclog.Logger
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	// latency: the foreground-latency canary runs; latencyOff says why
	// not, when it was tried and could not.
	latency    bool
	latencyOff string

	mu   sync.Mutex
	last throttle.Decision
	subs []chan throttle.Decision
	made jobRegistry // the jobs made with Job, for the metrics

	// limited is, per job of this process, the time spent at each why
	// (limited.go); external are the controller's External signals, each
	// a why of its own when it limits a job.
	limited  *pacing.LimitedTime
	external []signals.Name
	// prom are the Prometheus signals this process samples, for the
	// metrics.
	prom []signals.PrometheusSignal
	// engine is coordinated mode's engine, once started; work and
	// signalsWork are Options.Work and Options.Signals.Work (workedAt).
	engine            atomic.Pointer[coord.Engine]
	work, signalsWork func() time.Time
	// prepare makes a controller configuration the one this process
	// runs; judged is the last one prepared, for Unfresh.
	prepare func(throttle.Config) throttle.Config
	judged  atomic.Pointer[throttle.Config]
	// sampleMaxAge is the sampler's max age (signals.Config.MaxAge).
	sampleMaxAge time.Duration
}

// Open connects to the primary (and replicas), checks the sampling role,
// and starts sampling and deciding until Close. No job may start a batch
// before the first decision.
func Open(ctx context.Context, opts Options) (*Client, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	scfg, explicit, err := samplerConfig(opts, log)
	if err != nil {
		return nil, err
	}
	c, err := newClient(opts, scfg, log)
	if err != nil {
		return nil, err
	}
	if err := c.openDurable(ctx, opts, log); err != nil {
		c.abandon()
		return nil, err
	}
	if err := c.connect(ctx, explicit, log); err != nil {
		c.abandon()
		return nil, err
	}
	prepare := preparer(opts.Cores, scfg.Prometheus, c.latency && !explicit)
	if err := c.newController(opts.Controller, prepare); err != nil {
		c.abandon()
		return nil, err
	}
	c.start(ctx, opts, prepare)
	return c, nil
}

// samplerConfig is the sampler's configuration: Options.Signals with the
// servers and cores of opts, and the foreground-latency canary. A rule on
// foreground_latency (explicit) turns the canary on, and a canary that
// cannot run then fails Open; without a rule the canary is tried, and the
// default rule added where it runs.
func samplerConfig(opts Options, log hclog.Logger) (scfg signals.Config, explicit bool, err error) {
	scfg = opts.Signals
	scfg.PrimaryDSN, scfg.ReplicaDSNs, scfg.Cores = opts.PrimaryDSN, opts.ReplicaDSNs, opts.Cores
	// A Prometheus signal no required rule reads never fails Open.
	scfg.Prometheus.Signals = slices.Clone(scfg.Prometheus.Signals)
	for i, ps := range scfg.Prometheus.Signals {
		if r, ok := opts.Controller.Rules[ps.Name]; !ok || !r.Required {
			scfg.Prometheus.Signals[i].Optional = true
		}
	}
	_, explicit = opts.Controller.Rules[signals.ForegroundLatency]
	switch {
	case explicit && opts.NoForegroundLatency:
		return scfg, explicit, fmt.Errorf("throttled: Options.NoForegroundLatency is set and Controller.Rules has a rule on %s: one or the other", signals.ForegroundLatency)
	case explicit:
		scfg.ForegroundLatency = true
	case !opts.NoForegroundLatency:
		scfg.ForegroundLatency, scfg.ForegroundLatencyAuto = true, true
	}
	scfg.Logger = cmp.Or[hclog.Logger](scfg.Logger, log.Named("signals"))
	return scfg, explicit, nil
}

// newClient is a Client with its sampler and its in-process holds, not
// yet connected to anything.
func newClient(opts Options, scfg signals.Config, log hclog.Logger) (*Client, error) {
	local, err := hold.NewLocal(hold.LocalConfig{})
	if err != nil {
		return nil, err
	}
	c := &Client{ls: pacing.NewLimiters(nil), holds: local, log: log.Named("controller"), audits: make(chan holds.Entry, 64),
		onEnforce: opts.OnEnforce, onPrimary: opts.OnPrimaryChange, prom: scfg.Prometheus.Signals,
		work: opts.Work, signalsWork: scfg.Work, sampleMaxAge: cmp.Or(scfg.MaxAge, signals.DefaultMaxAge)}
	scfg.Work = c.workedAt
	if c.poller, err = signals.New(scfg); err != nil {
		return nil, err
	}
	return c, nil
}

// workedAt is when a job was last at work as this process knows it: its
// own jobs' batches (solo, or its coordinated workers), the batches the
// cluster's workers report while it leads, and Options.Work; the current
// time while one is. The sampler reads it for the job-free baselines.
func (c *Client) workedAt() time.Time {
	now := time.Now()
	last := c.ls.WorkedAt(now)
	if e := c.engine.Load(); e != nil {
		if t := e.WorkedAt(now); t.After(last) {
			last = t
		}
	}
	for _, f := range []func() time.Time{c.work, c.signalsWork} {
		if f == nil {
			continue
		}
		if t := f(); t.After(last) {
			last = t
		}
	}
	return last
}

// openDurable opens the durable holds when Options.CoordinationDSN names
// their database; coordinated mode needs them.
func (c *Client) openDurable(ctx context.Context, opts Options, log hclog.Logger) error {
	if opts.CoordinationDSN != "" {
		if err := c.openCoordination(ctx, opts, log); err != nil {
			return err
		}
	}
	if opts.Coordinate && c.store == nil {
		return fmt.Errorf("throttled: Coordinate needs CoordinationDSN")
	}
	return nil
}

// connect checks the sampler's role and servers now, for a clear error at
// start, and whether the canary can run: where it does without an
// explicit rule, the jobs are paced on it by default.
func (c *Client) connect(ctx context.Context, explicit bool, log hclog.Logger) error {
	if err := c.poller.Connect(ctx); err != nil {
		return err
	}
	c.latency, c.latencyOff = c.poller.ForegroundLatency()
	if c.latency && !explicit {
		log.Info("pacing on foreground latency too: the canary runs", "target", throttle.DefaultForegroundLatencyRule.Target)
	}
	return nil
}

// preparer returns what a controller of this process runs with, from a
// configuration it is given: solo or leading, one session on CPU is a
// step of 1/cores in primary_load (on few cores one sample a session up
// is no emergency), its rules may name the sampler's Prometheus signals,
// and with auto (a canary that runs on its own) it paces on the
// foreground's latency by default.
func preparer(cores float64, prom signals.PrometheusConfig, auto bool) func(throttle.Config) throttle.Config {
	return func(cfg throttle.Config) throttle.Config {
		cfg = withResolution(cfg, cores)
		cfg = withPrometheus(cfg, prom)
		if auto {
			cfg = withForegroundLatency(cfg)
		}
		return cfg
	}
}

// newController makes this process's controller from cfg, prepared, with
// every hold this process knows: its own, the durable ones and cfg's.
func (c *Client) newController(cfg throttle.Config, prepare func(throttle.Config) throttle.Config) error {
	ccfg := prepare(cfg)
	c.prepare = prepare
	c.judged.Store(&throttle.Config{Rules: ccfg.Rules})
	var durable unionHolds
	if c.watcher != nil {
		durable = append(durable, c.watcher)
	}
	if ccfg.Holds != nil {
		durable = append(durable, ccfg.Holds)
	}
	c.sources, c.durable = append(unionHolds{c.holds}, durable...), durable
	ccfg.Holds = c.sources
	ctl, err := throttle.New(ccfg)
	if err != nil {
		return err
	}
	c.ctl, c.tick, c.external = ctl, ctl.Config().Tick, ccfg.External
	c.limited = pacing.NewLimitedTime(limitedTicks * c.tick)
	return nil
}

// start runs the Client's loops until Close: the mode's (solo, sampling
// and deciding here; or coordinated, an engine whose leader does) and,
// with the durable holds, their watcher, the audit log, the primary's
// record and enforcement.
func (c *Client) start(ctx context.Context, opts Options, prepare func(throttle.Config) throttle.Config) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	if opts.Coordinate {
		c.startCoordinated(runCtx, opts, prepare)
	} else {
		c.mode = solo{c: c}
		c.wg.Go(func() { _ = c.poller.Run(runCtx) })
		c.wg.Go(func() { c.decide(runCtx) })
	}
	if c.store != nil {
		c.wg.Go(func() { _ = c.watcher.Run(runCtx) })
		c.wg.Go(func() { c.auditor(runCtx) })
		c.wg.Go(func() { c.watchPrimary(runCtx) })
		if opts.Enforce != nil {
			c.wg.Go(func() { c.enforce(runCtx, *opts.Enforce) })
		}
	}
}

// startCoordinated makes this process a worker of the cluster's leader
// (internal/coord), and a candidate to lead. Only the leader samples: this
// process's poller runs while it leads.
func (c *Client) startCoordinated(ctx context.Context, opts Options, prepare func(throttle.Config) throttle.Config) {
	c.poller.Close()
	e := coord.New(coord.Deps{Log: c.log, Pool: c.coord, Holds: c.sources, Changed: c.watcher.Changed, Poller: c.poller,
		Controller: opts.Controller, Published: c.published, Applied: c.observe, LimitedSeconds: func(j status.Job) map[status.Why]float64 { return c.limited.Seconds(time.Now(), j) }, Tick: c.tick, DeferLeadership: opts.DeferLeadership,
		Prepare: func(cfg throttle.Config) throttle.Config {
			cfg = prepare(cfg)
			cfg.Holds = c.durable
			cfg.ScaleAtWorkers = true // each worker scales its own lease by the ratio holds it knows
			return cfg
		}})
	c.engine.Store(e)
	c.mode = coordinated{c: c, e: e}
	c.wg.Go(func() { e.Run(ctx) })
}

// abandon closes what a failed Open opened.
func (c *Client) abandon() {
	c.poller.Close()
	c.closeCoordination()
}

// openCoordination connects to the durable holds and reads them once: a
// process started after a hold was made sees it before its first batch.
func (c *Client) openCoordination(ctx context.Context, opts Options, log hclog.Logger) error {
	pcfg, err := pgxpool.ParseConfig(opts.CoordinationDSN)
	if err != nil {
		return fmt.Errorf("throttled: CoordinationDSN: %w", err)
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "throttled-coordinator"
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if c.coord, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	if c.store, err = holds.New(c.coord, opts.Holds); err != nil {
		c.coord.Close()
		return err
	}
	if err := holds.Migrate(ctx, c.coord); err != nil {
		c.coord.Close()
		return err
	}
	c.watcher = holds.NewWatcher(c.coord, holds.WatcherConfig{Logger: log.Named("holds")})
	if err := c.watcher.Refresh(ctx); err != nil {
		c.coord.Close()
		return fmt.Errorf("throttled: read holds: %w", err)
	}
	return nil
}

func (c *Client) closeCoordination() {
	if c.coord != nil {
		c.coord.Close()
	}
}

// unionHolds is every hold any of its sources reports.
type unionHolds []throttle.HoldSource

func (u unionHolds) Applying(now time.Time, job string) []hold.Hold {
	var out []hold.Hold
	for _, s := range u {
		out = append(out, s.Applying(now, job)...)
	}
	return out
}

// auditor writes controller events to the audit log off the decide loop,
// so a slow database never delays a decision.
func (c *Client) auditor(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-c.audits:
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := c.store.Audit().Append(actx, e); err != nil {
				c.log.Warn("cannot write the audit log", "error", err, "event", e.Reason)
			}
			cancel()
		}
	}
}

// watchPrimary records, once a tick, the primary this process samples in
// the audit log when the log names another one last (AuditLog.RecordPrimary
// compares in the cluster, so a leader elected after a failover tells the
// change too). A change is logged as a page and handed to
// Options.OnPrimaryChange. Only a fresh identity counts: a follower's
// stopped poller keeps the primary it sampled while it led.
func (c *Client) watchPrimary(ctx context.Context) {
	t := time.NewTicker(c.tick)
	defer t.Stop()
	var last signals.Primary
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, ok := c.poller.Primary()
		if !ok || !c.mode.leader() || time.Since(id.Checked) > c.poller.Snapshot().MaxAge || id.Same(last) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		e, changed, err := c.store.Audit().RecordPrimary(rctx, id.Addr, id.Timeline)
		cancel()
		if err != nil {
			c.log.Warn("cannot record the primary in the audit log", "error", err, "primary", id.String())
			continue
		}
		last = id
		if changed && e.Detail["from_addr"] != nil {
			c.log.Error("page", "event", holds.EventPrimaryChanged, "message", e.Reason)
			if c.onPrimary != nil {
				c.onPrimary(e)
			}
		}
	}
}

// enforce checks every 2 s for job sessions working under a hold.
func (c *Client) enforce(ctx context.Context, cfg holds.EnforcerConfig) {
	e := holds.NewEnforcer(c.coord, c.watcher, cfg)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		vs, err := e.Enforce(ectx)
		cancel()
		if err != nil {
			c.log.Warn("enforcement check failed", "error", err)
		} else if c.onEnforce != nil {
			c.onEnforce(vs)
		}
		for _, v := range vs {
			c.log.Error("pause not honoured", "job", v.Job, "pid", v.PID, "running_for", v.RunningFor, "cancelled", v.Cancelled)
		}
	}
}

// decide steps the controller every tick and applies each decision.
func (c *Client) decide(ctx context.Context) {
	t := time.NewTicker(c.ctl.Config().Tick)
	defer t.Stop()
	for {
		var changed <-chan struct{}
		if c.watcher != nil {
			changed = c.watcher.Changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed: // a hold came or went: decide now, not at the next tick
		}
		for _, j := range c.ls.Waited() {
			c.ctl.Wanted(j)
		}
		snap := c.poller.Snapshot()
		d := c.ctl.Step(snap.At, snap)
		c.ls.Apply(d)
		c.observeDecision(time.Now(), d)
		c.published(d)
	}
}

// published logs and audits a decision's events and hands it to the
// subscribers.
func (c *Client) published(d throttle.Decision) {
	for _, e := range d.Events {
		if e.Page() {
			c.log.Error("page", "event", e.Kind, "signal", e.Signal, "value", e.Value, "threshold", e.Threshold, "message", e.Message)
		} else {
			c.log.Warn("mode change", "event", e.Kind, "message", e.Message)
		}
		if c.store != nil {
			select {
			case c.audits <- holds.Entry{Event: holds.EventMode, Actor: "throttled", Source: string(hold.SourceAuto), Reason: e.Message,
				Detail: map[string]any{"kind": e.Kind, "signal": e.Signal, "value": e.Value, "threshold": e.Threshold}}:
			default:
				c.log.Warn("audit queue full; event not audited", "event", e.Kind)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
}

// Pacer registers a job with the controller and returns its pacer, for
// callers that take tokens themselves (pacer.Wait before each batch, the
// returned function after it) or hand it to the River middleware. In
// coordinated mode the job becomes a worker of the cluster's leader.
func (c *Client) Pacer(cfg jobs.Config) (JobPacer, error) {
	jc := jobConfig(cfg)
	if err := jc.Validate(); err != nil {
		return nil, err
	}
	return c.mode.pacer(cfg, jc)
}

// jobConfig is what the controller registers of a job's configuration:
// its name, share and limits, and the tables and job rules that gate it.
func jobConfig(cfg jobs.Config) throttle.JobConfig {
	tables, sigs := throttle.GateUnion([]jobs.Config{cfg}, func(c jobs.Config) ([]string, []string) { return c.Tables, c.Signals })
	return throttle.JobConfig{Name: status.Job(cfg.Name), Weight: cfg.Weight, MinRate: cfg.MinRate, MaxRate: cfg.MaxRate, Tables: tables, Signals: sigs}
}

// Job registers a job with the controller and returns it, paced. db and
// fn may be nil for a job driven through jobs.Job.Acquire.
func (c *Client) Job(cfg jobs.Config, db jobs.DB, fn jobs.BatchFunc) (*jobs.Job, error) {
	// Check the whole configuration before registering anything: a
	// refused job must take no share of the budget.
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := c.Pacer(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = c.log.Named("jobs")
	}
	j, err := jobs.New(cfg, db, p, fn)
	if err != nil {
		return nil, err
	}
	c.made.add(cfg.Name, j)
	return j, nil
}

// Reconfigure replaces the controller's configuration (rules, replica
// policies, budget) after validating it; in coordinated mode only. A
// configuration the controller refuses changes nothing.
func (c *Client) Reconfigure(cfg throttle.Config) error {
	if _, ok := c.mode.(solo); ok {
		return c.mode.reconfigure(cfg)
	}
	probe := cfg
	probe.Holds = c.sources
	if _, err := throttle.New(probe); err != nil {
		return err
	}
	if err := c.mode.reconfigure(cfg); err != nil {
		return err
	}
	c.judged.Store(&throttle.Config{Rules: c.prepare(cfg).Rules})
	return nil
}

// Unfresh is the controller's judgment of sample x's age at now, as the
// rules this process runs make it: "" when fresh, else why not (older
// than its rule's max_age, or taken further than that in the future; see
// [throttle.Unfresh]). A signal no rule reads is judged by the sampler's
// max age. Every status surface calls a sample stale by it.
func (c *Client) Unfresh(now time.Time, x signals.Sample) string {
	maxAge, ok := c.judged.Load().MaxAgeOf(x.Name)
	if !ok {
		maxAge = c.sampleMaxAge
	}
	return throttle.Unfresh(now, x, maxAge)
}

// UpdateJob changes a registered job's weight and rate limits
// (coordinated mode).
func (c *Client) UpdateJob(cfg jobs.Config) error {
	jc := jobConfig(cfg)
	if err := jc.Validate(); err != nil {
		return err
	}
	return c.mode.update(cfg, jc)
}

// RemoveJob stops a job of this process: its pacer grants nothing more.
func (c *Client) RemoveJob(name string) error {
	return c.mode.remove(status.Job(name))
}

// Leader reports whether this process leads (always true without
// Options.Coordinate).
func (c *Client) Leader() bool { return c.mode.leader() }

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

// LocalHolds is this process's own set of holds, in memory: a hold added
// here pauses this process's jobs at the next tick, and no other
// process's (for those, see DurableHolds).
func (c *Client) LocalHolds() *hold.Local { return c.holds }

// ForegroundLatency reports whether the jobs are paced on the
// foreground's latency (the canary runs) and, when Open tried the canary
// by default and it could not run, why not.
func (c *Client) ForegroundLatency() (on bool, off string) { return c.latency, c.latencyOff }

// SamplerStats is how sampling each server has gone in this process.
func (c *Client) SamplerStats() []signals.ServerStats { return c.poller.Stats() }

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
	c.mode.close()
	c.closeCoordination()
	return nil
}

// HoldWatcher is this process's view of the durable holds (LISTEN/NOTIFY
// and a poll), or nil without Options.CoordinationDSN.
func (c *Client) HoldWatcher() *holds.Watcher { return c.watcher }

// DurableHolds is the cluster's holds, windows and audit log, in the
// database (schema throttled, migrated by Open): a hold made there
// pauses every process; nil without Options.CoordinationDSN.
func (c *Client) DurableHolds() *holds.DB { return c.store }
