package replay

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"golang.org/x/time/rate"
)

// gate opens and closes one policy's job between windows.
type gate struct {
	mu      sync.Mutex
	open    bool
	changed chan struct{}
}

func newGate() *gate { return &gate{changed: make(chan struct{})} }

func (g *gate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != open {
		g.open = open
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// wait returns once the gate is open, or ctx's error.
func (g *gate) wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		open, changed := g.open, g.changed
		g.mu.Unlock()
		if open {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// gatedPacer is a policy's pacer behind its window's gate: a batch
// starts only inside the policy's windows. It keeps what the job asks of
// the pacer besides Wait (the foreground's stretch for the batch size,
// the batch bounds, the explanation), so the job sizes its batches as it
// would unwindowed; the controller behind it sees a job with no work
// between windows, and keeps its budget.
type gatedPacer struct {
	inner jobs.Pacer
	g     *gate
}

func (p gatedPacer) Wait(ctx context.Context) (func(int64, time.Duration, error), error) {
	if err := p.g.wait(ctx); err != nil {
		return nil, err
	}
	done, err := p.inner.Wait(ctx)
	if err != nil {
		return nil, err
	}
	// A token that came as the window closed waits for the policy's next
	// window: its batch must not run in the foreground's alone window.
	if err := p.g.wait(ctx); err != nil {
		done(0, 0, err)
		return nil, err
	}
	return done, nil
}

func (p gatedPacer) ForegroundStretch() (float64, time.Time, bool) {
	if s, ok := p.inner.(jobs.Stretcher); ok {
		return s.ForegroundStretch()
	}
	return 0, time.Time{}, false
}

func (p gatedPacer) BatchBounds() (int, int, time.Duration, bool) {
	if b, ok := p.inner.(jobs.BatchBounder); ok {
		return b.BatchBounds()
	}
	return 0, 0, 0, false
}

func (p gatedPacer) Status() status.JobStatus {
	if e, ok := p.inner.(status.Explainer); ok {
		return e.Status()
	}
	return status.JobStatus{}
}

// blockJob is one policy's cleanup job in a block.
type blockJob struct {
	w    Window
	gate *gate
	job  *jobs.Job
	stop func()
	// setRate sets a fixed policy's rate, batches per second.
	setRate func(float64)
	// snapshot is an adaptive policy's own sampler's view (its canary
	// among it); nil for the others.
	snapshot func() signals.Snapshot
}

// newBlockJob builds the cleanup job of window w's policy behind a gate,
// counting its rows into rows. An a/a window has none.
func newBlockJob(ctx context.Context, cfg BlockConfig, w Window, rows *atomic.Int64, upTo *atomic.Int64) (*blockJob, error) {
	bj := &blockJob{w: w, gate: newGate(), stop: func() {}, setRate: func(float64) {}}
	if w.Policy == PolicyAA {
		return bj, nil
	}
	c := cfg.Cluster
	pcfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	purge, err := jobs.DeleteOlderThan(ctx, pool, EventsTable, "created_at", "id", Retention)
	if err != nil {
		pool.Close()
		return nil, err
	}
	// Every policy's job cleans from where the last window's left off: one
	// cursor for all (upTo), or each would trail the others over keys they
	// already cleaned, and do nothing.
	batch := func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		if u := upTo.Load(); u > 0 {
			b.Position = strconv.FormatInt(u, 10)
		}
		r, err := purge(ctx, tx, b)
		if err == nil {
			rows.Add(r.Rows)
			noteUpTo(upTo, r.Position)
		}
		return r, err
	}
	jcfg := jobConfig(cfg.Rows, cfg.BatchTarget, cfg.MaxBatch)
	jcfg.Name = jobName + "_" + sanitize(w.Label())
	var inner jobs.Pacer
	var stops []func()
	switch w.Policy {
	case PolicyAdaptive, PolicyAdaptiveLoad, PolicyAdaptiveTail, PolicyAdaptiveHeld, PolicyAdaptiveApp:
		opts := throttled.Options{
			PrimaryDSN:          c.Primary.DSN(pgcluster.RoleMonitor),
			ReplicaDSNs:         []string{c.Replica.DSN(pgcluster.RoleMonitor)},
			Cores:               float64(cfg.Cores),
			NoForegroundLatency: w.Policy == PolicyAdaptiveLoad,
		}
		opts.Signals.ForegroundLatencyTail = w.Policy == PolicyAdaptiveTail
		opts.Signals.ForegroundLatencyHeldBaseline = w.Policy == PolicyAdaptiveHeld
		if w.Policy != PolicyAdaptiveLoad && cfg.ForegroundTarget != 0 {
			rule := throttle.DefaultForegroundLatencyRule
			rule.Target = cfg.ForegroundTarget
			opts.Controller.Rules = map[signals.Name]throttle.Rule{signals.ForegroundLatency: rule}
		}
		if w.Policy == PolicyAdaptiveApp {
			if cfg.promURL == "" {
				pool.Close()
				return nil, fmt.Errorf("%s needs the lab's Prometheus", w.Policy)
			}
			opts.Signals.Prometheus = AppSignal(cfg.promURL)
			if opts.Controller.Rules == nil {
				opts.Controller.Rules = map[signals.Name]throttle.Rule{}
			}
			opts.Controller.Rules[AppSignalName] = AppRule
		}
		client, err := throttled.Open(ctx, opts)
		if err != nil {
			pool.Close()
			return nil, err
		}
		p, err := client.Pacer(jcfg)
		if err != nil {
			client.Close()
			pool.Close()
			return nil, err
		}
		inner, stops = p, append(stops, func() { client.Close() })
		bj.snapshot = client.Snapshot
	case PolicyUnthrottled:
		inner = newBasePacer(rate.Inf)
	case PolicyFixed:
		p := newBasePacer(rate.Limit(w.Rate))
		inner, bj.setRate = p, func(r float64) { p.set(rate.Limit(r), true) }
	case PolicyLagOnly, PolicyBinary:
		r, initial := rule(lagOnly), float64(baseInitRate)
		p := newBasePacer(baseInitRate)
		if w.Policy == PolicyBinary {
			r, initial = binary, baseMaxRate
			p = newBasePacer(baseMaxRate)
			p.set(baseMaxRate, false)
		}
		poller, err := signals.New(signals.Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor),
			ReplicaDSNs: []string{c.Replica.DSN(pgcluster.RoleMonitor)}, Cores: float64(cfg.Cores)})
		if err == nil {
			err = poller.Connect(ctx)
		}
		if err != nil {
			pool.Close()
			return nil, err
		}
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		wg.Go(func() { _ = poller.Run(pctx) })
		wg.Go(func() { pace(pctx, p, poller, r, initial) })
		inner, stops = p, append(stops, func() { cancel(); wg.Wait(); poller.Close() })
	}
	bj.job, err = jobs.New(jcfg, pool, gatedPacer{inner: inner, g: bj.gate}, batch)
	if err != nil {
		for _, s := range stops {
			s()
		}
		pool.Close()
		return nil, err
	}
	bj.stop = func() {
		for _, s := range stops {
			s()
		}
		pool.Close()
	}
	return bj, nil
}

// sanitize makes a policy label part of a job name.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// noteUpTo raises upTo to the key a batch reached, so Restore re-inserts
// only that far.
func noteUpTo(upTo *atomic.Int64, position string) {
	var k int64
	if _, err := fmt.Sscan(position, &k); err != nil {
		return
	}
	for {
		cur := upTo.Load()
		if k <= cur || upTo.CompareAndSwap(cur, k) {
			return
		}
	}
}
