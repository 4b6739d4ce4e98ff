package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// engine.go: the Engine, what it takes from its process (Deps), and its
// loop: each turn heartbeats, elects and, when leading, leads.

// DefaultLease is how long a published allocation stays valid, at the
// least (see leaseFor).
const DefaultLease = 3 * time.Second

// heartbeatEvery is how often a worker reports and reads its allocation.
const heartbeatEvery = 500 * time.Millisecond

// Deps are what an Engine uses of the process it runs in.
type Deps struct {
	Log hclog.Logger
	// Pool is the coordination database: throttled.workers and
	// throttled.leader, and the session the leader's lock lives on.
	Pool *pgxpool.Pool
	// Holds are every hold this process knows (durable, in-process,
	// configured): each pauses this process's workers at once.
	Holds throttle.HoldSource
	// Changed, when set, returns a channel closed when a hold comes or
	// goes, so the workers and the leader act at once.
	Changed func() <-chan struct{}
	// Poller samples the cluster; it runs only while this process leads.
	Poller Poller
	// Controller is the leader's controller configuration; Prepare makes
	// it the one a leader runs (its resolution and the cluster's durable
	// holds set), at takeover and at each reload.
	Controller throttle.Config
	Prepare    func(throttle.Config) throttle.Config
	// Published hears every decision this process makes as leader.
	Published func(throttle.Decision)
	// Applied, when set, hears each worker's status as every heartbeat
	// leaves it (its lease, a hold, or none to be had), with the time:
	// the Client counts from it the time each job spends at each why.
	// It must not block.
	Applied func(now time.Time, st status.JobStatus)
	// LimitedSeconds, when set, is the seconds a job spent at each why in
	// this process; each heartbeat writes its worker's to the database,
	// for `throttled status`.
	LimitedSeconds func(status.Job) map[status.Why]float64
	// Tick is how often the leader decides.
	Tick time.Duration
	// DeferLeadership, when above 0, makes this process a reluctant
	// candidate: it tries to lead only once no leader has published for
	// this long. A process that cannot page (throttled exec) defers, so
	// that a sidecar, which pages, takes leadership whenever one runs,
	// after a primary restart as at start; with none, leadership passes
	// to it this much later.
	DeferLeadership time.Duration
}

// Engine runs coordinated mode: every process is a worker; the one
// holding the advisory lock is also the leader.
type Engine struct {
	log       hclog.Logger
	pool      *pgxpool.Pool
	store     *store.Store // every statement on the pool
	holds     throttle.HoldSource
	changed   func() <-chan struct{}
	poller    Poller
	prepare   func(throttle.Config) throttle.Config
	published func(throttle.Decision)
	applied   func(time.Time, status.JobStatus)
	// limitedSeconds is Deps.LimitedSeconds.
	limitedSeconds func(status.Job) map[status.Why]float64
	tick           time.Duration
	procID         string
	lease          time.Duration
	deferLead      time.Duration // Deps.DeferLeadership
	election       *pgx.Conn     // the leader's lock lives on this session
	// idleUnset: the election session could not be given an idle
	// timeout (said once).
	idleUnset bool
	// term is this leader's fencing term (store.TakeTerm); a publication
	// of an older one writes nothing.
	term int64

	mu      sync.Mutex
	workers map[status.Job]*worker
	work    workWatch // the jobs' work as this process knows it

	leader     bool
	stopPoller context.CancelFunc
	pollerDone chan struct{}
	ctl        *throttle.Controller
	seen       map[string][3]float64 // per worker row: last batches, errors, duration_ms
	known      map[status.Job]bool   // jobs registered with ctl
	lastLead   time.Time
	isLeader   atomic.Bool
	controller throttle.Config  // the configuration a new leader starts from
	pending    *throttle.Config // a reloaded controller configuration, applied by run
	sampled    bool             // a fresh primary sample seen since taking over
	tookOver   time.Time        // when this process last became leader

	// beatDenied is set while heartbeats are refused for want of a
	// privilege, so the loss and the recovery are logged once.
	beatDenied atomic.Bool
	// publishDenied is why this leader's last publication was refused for
	// want of a privilege (nil once one succeeds): the reason its own
	// workers give when their leases lapse.
	publishDenied atomic.Pointer[permissionError]
}

// db is the coordination database's store of workers and the leader.
func (e *Engine) db() *store.Store { return e.store }

// Poller is what an Engine needs of the sampler.
type Poller interface {
	Snapshot() signals.Snapshot
	Run(ctx context.Context) error
}

// New returns an Engine; Run runs it.
func New(d Deps) *Engine {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	changed := d.Changed
	if changed == nil {
		changed = func() <-chan struct{} { return nil }
	}
	return &Engine{log: d.Log, pool: d.Pool, store: store.New(d.Pool), holds: d.Holds, changed: changed, poller: d.Poller, prepare: d.Prepare,
		published: d.Published, applied: d.Applied, limitedSeconds: d.LimitedSeconds, tick: d.Tick, controller: d.Controller, deferLead: d.DeferLeadership,
		procID: fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b)),
		lease:  leaseFor(d.Tick), workers: map[status.Job]*worker{}, seen: map[string][3]float64{}}
}

// leaseFor is the lease for a leader deciding every tick: DefaultLease,
// or three ticks when that is longer, so a healthy leader's allocations
// never lapse between its publications.
func leaseFor(tick time.Duration) time.Duration {
	return max(DefaultLease, 3*tick)
}

// Run heartbeats, keeps or seeks leadership, and leads, until ctx ends.
func (e *Engine) Run(ctx context.Context) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	defer e.stepDown("client closing")
	for {
		e.applyPending()
		e.heartbeat(ctx)
		e.elect(ctx)
		if e.leader && time.Since(e.lastLead) >= e.tick-heartbeatEvery/2 {
			e.lead(ctx)
			// This process's own workers read the allocation just
			// published now, not a heartbeat later: a new worker in the
			// leader's process would otherwise wait that much more for
			// its first batch.
			e.heartbeat(ctx)
		}
		changed := e.changed()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
			// A hold came or went: every worker applies it now; the
			// leader republishes at once.
			e.lastLead = time.Time{}
		}
	}
}

// Reconfigure queues a new controller configuration for Run to apply.
func (e *Engine) Reconfigure(cfg throttle.Config) {
	e.mu.Lock()
	e.pending = &cfg
	e.mu.Unlock()
}

// applyPending swaps in a reloaded controller configuration. A leader
// rebuilds its controller at its current budget: a reload changes rules,
// not the pace.
func (e *Engine) applyPending() {
	e.mu.Lock()
	p := e.pending
	e.pending = nil
	e.mu.Unlock()
	if p == nil {
		return
	}
	e.controller = *p
	if !e.leader {
		return
	}
	ccfg := e.prepare(*p)
	// The same controller, new rules: its state (a critical pause,
	// latched or not, the budget, what it learned) carries over.
	if err := e.ctl.Reconfigure(ccfg); err != nil {
		e.log.Error("reloaded controller configuration refused", "error", err)
	}
}

// Leader reports whether this process leads.
func (e *Engine) Leader() bool { return e.isLeader.Load() }

// Close stops every worker of this process (no lease applies to them
// again) and removes their rows, within 2 s; call it after Run returned.
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, w := range e.workers {
		w.stop()
		_ = e.db().Delete(ctx, w.id)
	}
	if e.election != nil {
		e.election.Close(ctx)
	}
}
