package signals

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config configures a [Poller]. The zero value of every field but
// PrimaryDSN and Cores means its default.
type Config struct {
	// PrimaryDSN is the primary's connection string (URL or keyword/value).
	// Its role needs pg_monitor and should not be a superuser. Required.
	PrimaryDSN string
	// ReplicaDSNs are optional direct connections to replicas, for the
	// replica-side signals. Each replica's lag is read on the primary
	// whether or not it is listed here; a listed replica is also expected
	// on the primary, so its absence is reported.
	ReplicaDSNs []string
	// Replicas names replicas (slot or application_name) expected on the
	// primary: each one absent is reported missing rather than silently
	// not reported. Physical slots and replicas seen earlier are always
	// expected.
	Replicas []string
	// Cores is the primary's CPU core count. No SQL reveals it, so it is
	// configuration; primary_load is on-CPU sessions divided by it.
	// Required, positive.
	Cores float64
	// Interval is how often each server is sampled. Defaults to 250ms.
	Interval time.Duration
	// Timeout bounds every query and connection attempt. A hung server
	// yields failed samples after it. Defaults to 1s.
	Timeout time.Duration
	// Smoothing is the EWMA time constant of primary_load,
	// primary_io_wait and primary_lock_wait. Defaults to 5s.
	Smoothing time.Duration
	// MaxAge is the age past which a sample is stale. Must exceed
	// Interval. Defaults to 3s.
	MaxAge time.Duration
	// ForegroundLatency turns on the foreground-latency canary: a one-row
	// commit on throttled.canary, timed every ForegroundLatencyInterval on
	// a connection of its own, read as foreground_latency (the latency
	// over a baseline learnt while no job works; 1.0 is the baseline) and
	// foreground_latency_seconds. It needs throttled's schema in the
	// primary's database (`throttled migrate`) and costs one connection
	// and, by default, twenty tiny commits a second. Off by default:
	// without it neither signal is sampled.
	ForegroundLatency bool
	// ForegroundLatencyAuto, with ForegroundLatency, makes the canary
	// optional: where it cannot run (its table missing, the role unable
	// to write it, a read-only primary; see [ErrCanaryUnavailable])
	// [Poller.Connect] turns it off and [Poller.ForegroundLatency] says
	// why, instead of failing. Without it such a canary fails Connect.
	ForegroundLatencyAuto bool
	// ForegroundLatencyInterval is how often the canary commits. Defaults
	// to 50ms: the two seconds of probes the ratio compares then hold 40,
	// so it moves with the server and not with one probe's luck, and the
	// ten job-free probes a baseline needs take half a second.
	ForegroundLatencyInterval time.Duration
	// ForegroundLatencyWindow is how long a baseline measured earlier
	// stands in while jobs are at work at nearly every probe (the
	// baseline is the mean latency of the probes that saw no job session
	// at work, measured afresh whenever the last two seconds hold ten of
	// them). It must hold at least 20 probes. Defaults to 1m.
	ForegroundLatencyWindow time.Duration
	// ForegroundLatencyHeldBaseline measures the baseline only while the
	// jobs are held, instead of from the job-free probes among the jobs'
	// batches. A job's batch leaves work behind it (WAL to send and
	// replay, dirty buffers, the job's own process) that slows the probes
	// between its batches too, so a baseline learnt from them rises with
	// the jobs and the ratio reads near 1 while they slow the foreground.
	// With it, the baseline is measured when it is unknown: at start,
	// and once it is ForegroundLatencyWindow old, when a required rule
	// holds the jobs (warming_up) for as long as the measurement takes:
	// ten probes for what the jobs left behind to settle (not at start),
	// then twenty job-free probes in a row (a second and a half at the
	// default interval). Between measurements everything that slows the
	// foreground, a surge of users as much as the jobs, counts against
	// the jobs. Off by default.
	ForegroundLatencyHeldBaseline bool
	// ForegroundLatencyTail compares the slowest fifth of the canary's
	// probes in the span with the slowest fifth of the job-free ones that
	// measured the baseline, instead of their means: the foreground's p99
	// moves with the few transactions that meet a job's burst, which
	// moves a mean little (see slowestFifth for the measurements). Off by
	// default: on the replay's probe blocks it read a cleanup's harm
	// further from its noise than the mean in quiet and write-heavy, and
	// a little nearer in surge, and it is not yet proven on the real pair
	// as the default.
	ForegroundLatencyTail bool
	// Custom are the custom signals (see custom.go): scalar queries run
	// on a connection of their own in READ ONLY transactions. None by
	// default.
	Custom []CustomSignal
	// Prometheus is where the Prometheus signals are read, and the
	// signals (prometheus.go): the application's own latency, apdex or
	// error rate. None by default.
	Prometheus PrometheusConfig
	// PgBouncerDSN is PgBouncer's admin console, such as
	// "host=pgbouncer port=6432 dbname=pgbouncer user=throttled_monitor":
	// its role must be in stats_users (admin_users also works, and can do
	// more than a sampler should). Optional: empty, the PgBouncer signals
	// are off and no connection is opened.
	PgBouncerDSN string
	// AllowSuperuser lets the sampler connect as a superuser. Off by
	// default: a superuser sampler hides a missing grant in production and
	// can take the reserved slots meant for a person fixing an outage.
	AllowSuperuser bool
	// Work, when set, says when this process last knew a job of the
	// cluster to be at work by its own means (its own jobs' batches, a
	// sidecar's tokens out, the batches its workers report): the zero
	// time for never, and the current time (or later) while one is. A
	// Prometheus signal's job-free baseline counts it beside the job
	// sessions primary_job_sessions sees, so a worker whose sessions carry
	// their own application_name still keeps its readings out of the
	// baseline. It is called from the sampler's goroutines: it must be
	// safe for concurrent use and must not block. Optional.
	Work func() time.Time
	// Logger receives connection events. Defaults to a null logger.
	Logger hclog.Logger

	// now is the clock; tests set it.
	now func() time.Time
}

// Defaults.
const (
	DefaultInterval  = 250 * time.Millisecond
	DefaultTimeout   = time.Second
	DefaultSmoothing = 5 * time.Second
	DefaultMaxAge    = 3 * time.Second
)

func (c *Config) fill() {
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Smoothing = cmp.Or(c.Smoothing, DefaultSmoothing)
	c.MaxAge = cmp.Or(c.MaxAge, DefaultMaxAge)
	c.ForegroundLatencyInterval = cmp.Or(c.ForegroundLatencyInterval, DefaultForegroundLatencyInterval)
	c.ForegroundLatencyWindow = cmp.Or(c.ForegroundLatencyWindow, DefaultForegroundLatencyWindow)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.now == nil {
		c.now = time.Now
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("signals: "+format, args...)) }
	if c.PrimaryDSN == "" {
		bad("PrimaryDSN is required")
	}
	if c.Cores <= 0 || math.IsNaN(c.Cores) || math.IsInf(c.Cores, 0) {
		bad("Cores must be a positive number of CPU cores, got %v", c.Cores)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Interval", c.Interval}, {"Timeout", c.Timeout}, {"Smoothing", c.Smoothing}, {"MaxAge", c.MaxAge},
		{"ForegroundLatencyInterval", c.ForegroundLatencyInterval}, {"ForegroundLatencyWindow", c.ForegroundLatencyWindow}} {
		if f.d < 0 {
			bad("%s must not be negative, got %s", f.name, f.d)
		}
	}
	if c.Interval > 0 && c.MaxAge > 0 && c.Interval >= c.MaxAge {
		bad("Interval %s must be shorter than MaxAge %s, or every sample is stale", c.Interval, c.MaxAge)
	}
	if c.ForegroundLatency && c.ForegroundLatencyInterval > 0 && c.ForegroundLatencyWindow > 0 && c.ForegroundLatencyWindow < minWindowProbes*c.ForegroundLatencyInterval {
		bad("ForegroundLatencyWindow %s must hold at least %d probes, one every ForegroundLatencyInterval %s", c.ForegroundLatencyWindow, minWindowProbes, c.ForegroundLatencyInterval)
	}
	if c.ForegroundLatency && c.ForegroundLatencyInterval > 0 && c.MaxAge > 0 && c.ForegroundLatencyInterval >= c.MaxAge {
		bad("ForegroundLatencyInterval %s must be shorter than MaxAge %s, or every canary sample is stale", c.ForegroundLatencyInterval, c.MaxAge)
	}
	for i, r := range c.Replicas {
		if r == "" {
			bad("Replicas[%d] is empty", i)
		}
	}
	for _, p := range c.Prometheus.Problems() {
		bad("Prometheus: %s", p)
	}
	for _, s := range c.Prometheus.Signals {
		if slices.ContainsFunc(c.Custom, func(x CustomSignal) bool { return x.Name == s.Name }) {
			bad("Prometheus: %s: also a custom signal's name", s.where())
		}
	}
	return errors.Join(errs...)
}

// Poller samples a primary and its replicas on an interval and keeps the
// latest sample of every signal. Create it with [New]; call [Poller.Run]
// to sample continuously, or [Poller.Tick] to sample once, never both at
// once. [Poller.Snapshot] is safe to call from any goroutine at any time.
type Poller struct {
	cfg      Config
	log      hclog.Logger
	primary  *primarySampler
	replicas []*replicaSampler
	canary   *canarySampler // nil unless Config.ForegroundLatency
	// canaryOff says why an automatic canary was turned off at Connect.
	canaryOff string
	custom    *customSampler // nil without Config.Custom
	// bouncer reads PgBouncer's pools; nil without Config.PgBouncerDSN.
	bouncer *pgbouncerSampler
	// prom reads the Prometheus signals; nil without any.
	prom *promSampler

	mu      sync.Mutex
	current Primary             // the primary sampled last
	latest  map[string][]Sample // by sampler id
	learnt  map[string]bool     // replica names learnt from replica DSNs
	stats   map[string]*ServerStats
	jobs    jobWatch // the jobs' work as the primary's samples saw it
}

// ServerStats is how sampling one server has gone.
type ServerStats struct {
	// Server is "primary", "replica-N", "canary" (the
	// foreground-latency canary's own connection to the primary),
	// "pgbouncer" (PgBouncer's admin console), "custom" or "prometheus".
	Server string
	// Ticks and Failures count sampling rounds, and those that failed.
	Ticks, Failures int64
	// LastDuration is how long the last round took.
	LastDuration time.Duration
}

// Stats returns each server's sampling statistics, primary first.
func (p *Poller) Stats() []ServerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ServerStats
	for _, id := range slices.Sorted(maps.Keys(p.stats)) {
		out = append(out, *p.stats[id])
	}
	return out
}

// sampleAndStore takes one round of s and records it.
func (p *Poller) sampleAndStore(ctx context.Context, s sampler) {
	start := time.Now()
	samples := s.sample(ctx, p.cfg.now)
	took := time.Since(start)
	// A signal still learning (a rate's first window, the canary's
	// baseline) is unusable but no failed round.
	failed := slices.ContainsFunc(samples, func(x Sample) bool {
		return x.Err != nil && !errors.Is(x.Err, errWALWarmup) && !errors.Is(x.Err, ErrBaselineWarmup) && !errors.Is(x.Err, ErrWarmingUp)
	})
	p.mu.Lock()
	if s == sampler(p.primary) {
		p.watchJobs(samples)
	}
	st := p.stats[s.id()]
	if st == nil {
		st = &ServerStats{Server: s.id()}
		p.stats[s.id()] = st
	}
	st.Ticks++
	if failed {
		st.Failures++
	}
	st.LastDuration = took
	p.latest[s.id()] = samples
	p.mu.Unlock()
}

// New validates cfg and returns a Poller. It does not connect.
func New(cfg Config) (*Poller, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Poller{cfg: cfg, log: cfg.Logger, latest: map[string][]Sample{}, learnt: map[string]bool{}, stats: map[string]*ServerStats{}}
	ps, err := newServer(kindPrimary, cfg.PrimaryDSN, cfg.Timeout, cfg.AllowSuperuser, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("signals: PrimaryDSN: %w", err)
	}
	p.primary = &primarySampler{srv: ps, cores: cfg.Cores, smooth: newLoadSmoother(cfg.Smoothing),
		seen: map[string]bool{}, expected: p.expectedReplicas, publish: p.setPrimary}
	for i, dsn := range cfg.ReplicaDSNs {
		rs, err := newServer(kindReplica, dsn, cfg.Timeout, cfg.AllowSuperuser, cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("signals: ReplicaDSNs[%d]: %w", i, err)
		}
		p.replicas = append(p.replicas, &replicaSampler{srv: rs, sid: fmt.Sprintf("replica-%d", i), learn: p.learn})
	}
	if cfg.ForegroundLatency {
		if p.canary, err = newCanarySampler(cfg); err != nil {
			return nil, fmt.Errorf("signals: PrimaryDSN: %w", err)
		}
	}
	if len(cfg.Custom) > 0 {
		if p.custom, err = newCustomSampler(cfg); err != nil {
			return nil, fmt.Errorf("signals: %w", err)
		}
	}
	if cfg.PgBouncerDSN != "" {
		if p.bouncer, err = newPgBouncerSampler(cfg); err != nil {
			return nil, fmt.Errorf("signals: PgBouncerDSN: %w", err)
		}
	}
	if len(cfg.Prometheus.Signals) > 0 {
		if p.prom, err = newPromSampler(cfg.Prometheus, p.jobWatch); err != nil {
			return nil, fmt.Errorf("signals: %w", err)
		}
	}
	return p, nil
}

// Connect connects to every server and checks each role and kind, so
// that a bad DSN, an unreachable server or a missing grant fails at start
// with a clear error rather than as failed samples. It is optional:
// Run and Tick connect (and reconnect) as needed.
func (p *Poller) Connect(ctx context.Context) error {
	now := p.cfg.now()
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range p.samplers() {
		wg.Go(func() {
			if srv := s.server(); srv != nil {
				if err := srv.ensureWithin(ctx, now, max(StartTimeout, srv.timeout)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
			if r, ok := s.(*replicaSampler); ok {
				p.learn(r.srv.replicaName)
			}
			// The canary and the custom signals also run once, so a
			// missing table or a bad query fails here.
			if c, ok := s.(interface{ preflight(context.Context) error }); ok {
				if err := c.preflight(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if p.canary != nil && p.cfg.ForegroundLatencyAuto {
		// An automatic canary that cannot run here is off, not an error:
		// say why once, and sample without it.
		for i, err := range errs {
			if errors.Is(err, ErrCanaryUnavailable) {
				p.canary.server().close()
				p.canary, p.canaryOff = nil, err.Error()
				p.log.Info("foreground latency off: the canary cannot run on this primary", "why", err)
				errs = slices.Delete(errs, i, i+1)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// ForegroundLatency reports whether the foreground-latency canary is on
// and, when Config.ForegroundLatency asked for it but Connect turned it
// off (Config.ForegroundLatencyAuto), why. Call it after Connect.
func (p *Poller) ForegroundLatency() (on bool, off string) {
	return p.canary != nil, p.canaryOff
}

// Tick samples every server once, concurrently, and returns when all
// are done (each bounded by Config.Timeout). The foreground-latency
// canary, when on, runs after them: its commit is then never a session
// on CPU in the activity counts, and it sees this tick's job sessions.
func (p *Poller) Tick(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range p.samplers() {
		if s == sampler(p.canary) {
			continue
		}
		wg.Go(func() { p.sampleAndStore(ctx, s) })
	}
	wg.Wait()
	if p.canary != nil {
		p.sampleAndStore(ctx, p.canary)
	}
}

// Run samples every server each Config.Interval, each in its own
// goroutine, until ctx ends; then it closes the connections and returns
// ctx's error.
func (p *Poller) Run(ctx context.Context) error {
	// The jobs' watch starts over: the time this Poller did not run (a
	// leader that stepped down and leads again) was not watched, and is
	// never job-free.
	p.mu.Lock()
	p.jobs = jobWatch{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range p.samplers() {
		wg.Go(func() {
			every := p.cfg.Interval
			if s == sampler(p.canary) {
				every = p.cfg.ForegroundLatencyInterval
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				p.sampleAndStore(ctx, s)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
	p.Close()
	return ctx.Err()
}

// Close closes every connection. Call it after Tick when not using Run.
func (p *Poller) Close() {
	for _, s := range p.samplers() {
		if srv := s.server(); srv != nil {
			srv.close()
		}
	}
}

// Snapshot returns the latest sample of every signal, as of now.
func (p *Poller) Snapshot() Snapshot {
	p.mu.Lock()
	var all []Sample
	for _, id := range slices.Sorted(maps.Keys(p.latest)) {
		all = append(all, p.latest[id]...)
	}
	p.mu.Unlock()
	sortSamples(all)
	return Snapshot{At: p.cfg.now(), MaxAge: p.cfg.MaxAge, Samples: all}
}

// Primary returns the server the Poller sampled as the primary last, and
// whether it has sampled one. After a failover it names the new primary
// (a new address or timeline, and Since when it was first sampled) once a
// tick has succeeded there. Safe for concurrent use.
func (p *Poller) Primary() (Primary, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current, !p.current.Since.IsZero()
}

func (p *Poller) setPrimary(id Primary) {
	p.mu.Lock()
	p.current = id
	p.mu.Unlock()
}

func (p *Poller) learn(name string) {
	if name == "" {
		return
	}
	p.mu.Lock()
	p.learnt[name] = true
	p.mu.Unlock()
}

func (p *Poller) expectedReplicas() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := slices.Clone(p.cfg.Replicas)
	for n := range p.learnt {
		names = append(names, n)
	}
	return names
}

func (p *Poller) samplers() []sampler {
	out := []sampler{p.primary}
	for _, r := range p.replicas {
		out = append(out, r)
	}
	if p.canary != nil {
		out = append(out, p.canary)
	}
	if p.bouncer != nil {
		out = append(out, p.bouncer)
	}
	if p.custom != nil {
		out = append(out, p.custom)
	}
	if p.prom != nil {
		out = append(out, p.prom)
	}
	return out
}

// watchJobs records, from a primary round's samples, whether a job
// session was at work: one that failed could not tell, which counts as
// at work (no reading of its time is job-free), and so does a gap
// between two rounds longer than MaxAge (a sampler stalled or stopped: a
// time nobody watched). Called with p.mu held.
func (p *Poller) watchJobs(samples []Sample) {
	for _, x := range samples {
		if x.Name != PrimaryJobSessions {
			continue
		}
		if p.jobs.from.IsZero() && x.Err == nil {
			p.jobs.from = x.At
		}
		gap := !p.jobs.last.IsZero() && x.At.Sub(p.jobs.last) > p.cfg.MaxAge
		if x.Err != nil || x.Raw > 0 || gap {
			p.jobs.seen = x.At
		}
		p.jobs.last = x.At
	}
}

// jobWatch is what this process knows of the jobs' work: what the
// primary's samples saw, and Config.Work.
func (p *Poller) jobWatch() jobWatch {
	p.mu.Lock()
	w := p.jobs
	p.mu.Unlock()
	if p.cfg.Work != nil {
		if t := p.cfg.Work(); t.After(w.seen) {
			w.seen = t
		}
	}
	return w
}
