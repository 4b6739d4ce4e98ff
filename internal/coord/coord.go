// Package coord is coordinated mode: many processes pacing jobs against
// one cluster. Every process is a worker: a row in throttled.workers per
// job, a local limiter, a heartbeat that reports its consumption and reads
// its lease. The process holding a session advisory lock is also the
// leader: it alone samples, decides with a throttle.Controller, and
// publishes each worker's allocation with a short lease (package store
// runs every statement). A worker whose lease lapses stops: fail closed.
package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/limit"
)

// leaderLockKey is the session advisory lock the leader holds ("thrldr").
const leaderLockKey = 0x7468726c6472

// DefaultLease is how long a published allocation stays valid, at the
// least (see leaseFor).
const DefaultLease = 3 * time.Second

// heartbeatEvery is how often a worker reports and reads its allocation.
const heartbeatEvery = 500 * time.Millisecond

// tablePrivileges are what the coordination role needs on each of
// coordinated mode's tables.
var tablePrivileges = map[string]string{
	store.WorkersTable: "SELECT, INSERT, UPDATE, DELETE",
	store.LeaderTable:  "SELECT, INSERT, UPDATE",
}

// permissionError is a statement of coordinated mode that the coordination
// role may not run on one of throttled's tables (SQLSTATE 42501,
// insufficient_privilege, also raised when the role lacks USAGE on the
// schema). It is not an outage: it lasts until someone runs the GRANT it
// names, so it is said as such, never as "cannot reach".
type permissionError struct {
	role  string
	table string
	err   error
}

func (e *permissionError) Error() string {
	role := pgx.Identifier{e.role}.Sanitize()
	return fmt.Sprintf("throttled: permission denied: the coordination role %s lacks a privilege on %s (SQLSTATE 42501 insufficient_privilege); "+
		"run GRANT USAGE ON SCHEMA throttled TO %s; GRANT %s ON %s TO %s: %v",
		role, e.table, role, tablePrivileges[e.table], e.table, role, e.err)
}

func (e *permissionError) Unwrap() error { return e.err }

// denied turns err, a store.TableError, into a permissionError on its
// table when the server refused it for want of a privilege, and returns
// any other error as is.
func (e *Engine) denied(err error) error {
	var perm *permissionError
	var pgErr *pgconn.PgError
	var te *store.TableError
	if !errors.As(err, &perm) && errors.As(err, &pgErr) && pgErr.Code == "42501" && errors.As(err, &te) {
		return &permissionError{role: e.pool.Config().ConnConfig.User, table: te.Table, err: te.Err}
	}
	return err
}

// worker is one job of this process in coordinated mode: a row in
// throttled.workers, a local limiter and the consumption it reports.
type worker struct {
	id      string
	cfg     jobs.Config
	l       *limit.Limiter
	batches atomic.Int64
	errors  atomic.Int64
	durUs   atomic.Int64

	mu      sync.Mutex
	st      throttle.JobStatus // CodeUnavailable: paused because no valid allocation can be had
	expiry  *time.Timer        // pauses the worker when its lease lapses
	stopped bool               // removed: no lease applies again
	granted bool               // a running allocation was applied once
}

// isStopped reports whether the worker was removed.
func (w *worker) isStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// Unavailable reports whether the worker is paused for want of a valid
// allocation (lease expired, database unreachable, no leader yet), as
// opposed to a hold or the controller's decision.
func (w *worker) Unavailable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st.Code == throttle.CodeUnavailable
}

// lapse pauses the worker for want of an allocation.
func (w *worker) lapse(reason string) {
	w.l.Pause(reason)
	w.mu.Lock()
	w.st = throttle.JobStatus{Job: w.st.Job, State: throttle.JobPaused, Code: throttle.CodeUnavailable, Reason: reason}
	w.mu.Unlock()
}

// lease applies a valid allocation until remaining has passed: a timer
// pauses the worker then unless a heartbeat renews it first, so a worker
// never works past its lease, however slow its heartbeats.
func (w *worker) lease(a limit.Allocation, remaining time.Duration, st throttle.JobStatus) {
	// Under w.mu throughout, so a stop cannot land between the check and
	// the limiter's resume: a removed worker's in-flight heartbeat never
	// revives it.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.expiry != nil {
		w.expiry.Stop()
	}
	w.expiry = time.AfterFunc(remaining, func() { w.lapse("allocation lease expired: no leader renewed it") })
	st.Job, st.Rate = w.st.Job, a.Rate
	w.st = st
	if !w.granted && a.Rate > 0 && st.State != throttle.JobPaused {
		// A new worker's bucket starts empty, so its first batch would
		// wait 1/rate: minutes at a small share. Its first allocation
		// takes effect as of one token ago when it runs, so the first
		// batch starts at once and the rate paces the ones after it.
		// Throttled, its first token falls due at a random point of its
		// first interval instead: many new workers sharing a small rate
		// then start their batches spread at the job's rate from the
		// first second, where empty buckets would all wait n/rate before
		// any batch showed use.
		ago := 1.0
		if st.State != throttle.JobRunning && st.Code != throttle.CodeScaled && st.Code != throttle.CodeExempt {
			ago = mrand.Float64()
		}
		w.granted = true
		w.l.ApplyAt(time.Now().Add(-time.Duration(ago*float64(time.Second)/a.Rate)), a)
	} else {
		w.l.Apply(a)
	}
	if st.State == throttle.JobPaused {
		w.l.Pause(st.Reason)
	} else {
		w.l.Resume()
	}
}

func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.expiry != nil {
		w.expiry.Stop()
	}
	w.l.Pause("worker stopped")
}

func (w *worker) Wait(ctx context.Context) (func(int64, time.Duration, error), error) {
	g, err := w.l.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return w.done(g), nil
}

func (w *worker) Allow() (func(int64, time.Duration, error), bool) {
	g, ok := w.l.Allow()
	if !ok {
		return nil, false
	}
	return w.done(g), true
}

func (w *worker) done(g limit.Grant) func(int64, time.Duration, error) {
	return g.Done(func(_ int64, took time.Duration, err error) {
		w.batches.Add(1)
		w.durUs.Add(took.Microseconds())
		if err != nil {
			w.errors.Add(1)
		}
	})
}

func (w *worker) Explain() (state, reason, binding string, rate float64) {
	st := w.Status()
	return string(st.State), st.Reason, st.Binding, st.Rate
}

func (w *worker) Status() throttle.JobStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.Holds = slices.Clone(st.Holds)
	return st
}

// Status is job j's worker's status: unavailable when this process runs
// no worker of it.
func (e *Engine) Status(j throttle.Job) throttle.JobStatus {
	e.mu.Lock()
	w, ok := e.workers[j]
	e.mu.Unlock()
	if !ok {
		return throttle.JobStatus{Job: j, State: throttle.JobPaused, Code: throttle.CodeUnavailable, Reason: "no worker of this job in this process"}
	}
	return w.Status()
}

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
	Applied func(now time.Time, st throttle.JobStatus)
	// LimitedSeconds, when set, is the seconds a job spent at each why in
	// this process; each heartbeat writes its worker's to the database,
	// for `throttled status`.
	LimitedSeconds func(throttle.Job) map[throttle.Why]float64
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
	applied   func(time.Time, throttle.JobStatus)
	// limitedSeconds is Deps.LimitedSeconds.
	limitedSeconds func(throttle.Job) map[throttle.Why]float64
	tick           time.Duration
	procID         string
	lease          time.Duration
	deferLead      time.Duration // Deps.DeferLeadership
	election       *pgx.Conn     // the leader's lock lives on this session

	mu      sync.Mutex
	workers map[throttle.Job]*worker

	leader     bool
	stopPoller context.CancelFunc
	pollerDone chan struct{}
	ctl        *throttle.Controller
	seen       map[string][3]float64 // per worker row: last batches, errors, duration_ms
	known      map[throttle.Job]bool // jobs registered with ctl
	lastLead   time.Time
	isLeader   atomic.Bool
	controller throttle.Config  // the configuration a new leader starts from
	pending    *throttle.Config // a reloaded controller configuration, applied by run
	sampled    bool             // a fresh primary sample seen since taking over

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
		lease:  leaseFor(d.Tick), workers: map[throttle.Job]*worker{}, seen: map[string][3]float64{}}
}

// leaseFor is the lease for a leader deciding every tick: DefaultLease,
// or three ticks when that is longer, so a healthy leader's allocations
// never lapse between its publications.
func leaseFor(tick time.Duration) time.Duration {
	return max(DefaultLease, 3*tick)
}

// Register adds a job of this process as a worker row and returns its
// worker: a pacer that applies its lease.
func (e *Engine) Register(ctx context.Context, cfg jobs.Config) (*worker, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := throttle.Job(cfg.Name)
	if w, ok := e.workers[j]; ok {
		return w, nil
	}
	w := &worker{id: e.procID + "/" + cfg.Name, cfg: cfg, l: limit.New(string(j), nil), st: throttle.JobStatus{Job: j}}
	w.lapse("waiting for the leader's first allocation")
	if err := e.upsert(ctx, w); err != nil {
		return nil, err
	}
	e.workers[j] = w
	return w, nil
}

// Update changes a registered job's weight and rate limits.
func (e *Engine) Update(ctx context.Context, cfg jobs.Config) error {
	e.mu.Lock()
	w, ok := e.workers[throttle.Job(cfg.Name)]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("throttled: job %q is not registered", cfg.Name)
	}
	w.mu.Lock()
	w.cfg.Weight, w.cfg.MinRate, w.cfg.MaxRate = cfg.Weight, cfg.MinRate, cfg.MaxRate
	w.mu.Unlock()
	return e.upsert(ctx, w)
}

// Remove stops a job of this process and deletes its worker row.
func (e *Engine) Remove(ctx context.Context, j throttle.Job) error {
	e.mu.Lock()
	w, ok := e.workers[j]
	delete(e.workers, j)
	e.mu.Unlock()
	if !ok {
		return nil
	}
	w.stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return e.db().Delete(ctx, w.id)
}

func (e *Engine) upsert(ctx context.Context, w *worker) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	w.mu.Lock()
	weight, minRate, maxRate := max(w.cfg.Weight, 0), w.cfg.MinRate, w.cfg.MaxRate
	tables, sigs := w.cfg.Tables, w.cfg.Signals
	w.mu.Unlock()
	if err := e.db().Upsert(ctx, store.Worker{ID: w.id, Job: w.cfg.Name, Weight: weight, MinRate: minRate, MaxRate: maxRate, Tables: tables, Signals: sigs,
		PrefersLead: e.deferLead == 0}); err != nil {
		return fmt.Errorf("throttled: register worker %s: %w", w.id, e.denied(err))
	}
	return nil
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

// claimResume takes a person's request to resume a latched critical
// pause, if one waits, and hands it to the controller.
func (e *Engine) claimResume(ctx context.Context, now time.Time) {
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	by, asked, err := e.db().ClaimResume(lctx)
	switch {
	case err != nil:
		e.log.Warn("cannot read resume requests", "error", e.denied(err))
	case !asked:
	case e.ctl.Resume(now, by):
		e.log.Warn("latched critical pause resumed", "by", by)
	default:
		e.log.Info("a resume request found no latched critical pause", "by", by)
	}
}

// heartbeat reports each local worker's consumption, reads back its
// allocation and applies it, every worker at once. A valid lease is
// applied until it lapses (a timer pauses the worker then); a failed
// heartbeat or an expired lease pauses it now. Any hold this process
// knows of (durable, in-process, or configured) pauses it at once, leader
// or not.
func (e *Engine) heartbeat(ctx context.Context) {
	e.mu.Lock()
	ws := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		ws = append(ws, w)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { e.beat(ctx, w) })
	}
	wg.Wait()
}

// limited is job's seconds at each why in this process, for its worker's
// heartbeat; nil without Deps.LimitedSeconds.
func (e *Engine) limited(job string) map[string]float64 {
	if e.limitedSeconds == nil {
		return nil
	}
	secs := e.limitedSeconds(throttle.Job(job))
	out := make(map[string]float64, len(secs))
	for w, s := range secs {
		out[string(w)] = s
	}
	return out
}

func (e *Engine) beat(ctx context.Context, w *worker) {
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	lease, err := e.db().Beat(hctx, w.id, store.Counters{Batches: w.batches.Load(), Errors: w.errors.Load(), DurationMs: float64(w.durUs.Load()) / 1000, Waiting: w.l.Waited(), Limited: e.limited(w.cfg.Name)})
	cancel()
	if w.isStopped() {
		return // removed while this heartbeat was in flight
	}
	if e.applied != nil {
		defer func() { e.applied(time.Now(), w.Status()) }()
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = e.upsert(ctx, w) // removed as stale while we could not reach it
		lease.Remaining = 0
	}
	err = e.denied(err)
	var perm *permissionError
	switch {
	case errors.As(err, &perm):
		if !e.beatDenied.Swap(true) {
			e.log.Error("heartbeat refused: workers pause until the coordination role is granted what it lacks", "error", err)
		}
	case err == nil && e.beatDenied.CompareAndSwap(true, false):
		e.log.Info("heartbeats accepted again")
	}
	known := e.holds.Applying(time.Now(), throttle.Job(w.cfg.Name))
	if hs := throttle.Pausing(known); len(hs) > 0 {
		// Holds that cannot be confirmed say so first, whatever else
		// applies: the state is unknown, not merely held.
		if i := slices.IndexFunc(hs, func(h throttle.Hold) bool { return h.ID == holds.UnconfirmedHoldID }); i > 0 {
			hs[0], hs[i] = hs[i], hs[0]
		}
		st := throttle.Held(throttle.Job(w.cfg.Name), hs)
		if hs[0].ID == holds.UnconfirmedHoldID {
			st.Code = throttle.CodeUnavailable
		}
		w.l.Pause(st.Reason)
		w.mu.Lock()
		w.st = st
		w.mu.Unlock()
		return
	}
	switch {
	case perm != nil:
		w.lapse("no allocation: " + err.Error())
	case err != nil:
		w.lapse("no allocation: cannot reach the coordination database: " + err.Error())
	case lease.Remaining <= 0:
		if pd := e.publishDenied.Load(); pd != nil && e.isLeader.Load() {
			w.lapse("allocation lease expired: this process leads but may not publish: " + pd.Error())
			return
		}
		w.lapse("allocation lease expired: no leader renewed it")
	default:
		st := throttle.JobStatus{State: throttle.JobState(lease.State), Code: throttle.Code(lease.Code), Reason: lease.Reason, Binding: lease.Binding}
		st.Code = throttle.CodeFor(st.State, st.Code) // a row an older leader wrote has none, or a stale one
		a := limit.Allocation{Rate: lease.Rate, Burst: lease.Burst, MaxInFlight: lease.MaxInFlight}
		// Ratio holds scale this worker's lease here, whichever process
		// placed them: the leader's allocations are unscaled.
		if _, by := throttle.Scale(known); by != nil && a.Rate > 0 {
			a.Rate *= by.Ratio
			st.Rate = lease.Rate
			st = throttle.Scaled(st, *by)
		}
		w.lease(a, lease.Remaining, st)
	}
}

// elect keeps the lock if it has it, or tries to take it.
func (e *Engine) elect(ctx context.Context) {
	ectx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if e.election == nil || e.election.IsClosed() {
		e.stepDown("lost the election session")
		conn, err := pgx.ConnectConfig(ectx, e.pool.Config().ConnConfig.Copy())
		if err != nil {
			return
		}
		e.election = conn
	}
	if e.leader {
		if _, err := e.election.Exec(ectx, "SELECT 1"); err != nil {
			e.election.Close(context.WithoutCancel(ctx))
			e.election = nil
			e.stepDown("leader session lost: " + err.Error())
			return
		}
		// A deferring leader (it cannot page) yields to a live process
		// that prefers to lead: closing the session releases the lock.
		if e.deferLead > 0 {
			if yes, err := e.db().PreferredAlive(ectx, e.procID, e.lease); err == nil && yes {
				e.election.Close(context.WithoutCancel(ctx))
				e.election = nil
				e.stepDown("a process that pages (a sidecar) is running: it leads")
			}
		}
		return
	}
	if e.deferLead > 0 {
		var quiet bool
		err := e.election.QueryRow(ectx, `SELECT coalesce((SELECT published_at < now() - make_interval(secs => $1) FROM throttled.leader WHERE id = 1), true)`,
			e.deferLead.Seconds()).Scan(&quiet)
		if err != nil || !quiet {
			return // a leader published recently, or we cannot tell: let it lead
		}
	}
	var got bool
	if err := e.election.QueryRow(ectx, "SELECT pg_try_advisory_lock($1)", int64(leaderLockKey)).Scan(&got); err != nil {
		e.election.Close(context.WithoutCancel(ctx))
		e.election = nil
		return
	}
	if got {
		if err := e.becomeLeader(ctx); err != nil {
			e.log.Warn("cannot lead", "error", err)
			e.election.Close(context.WithoutCancel(ctx)) // releases the lock
			e.election = nil
		}
	}
}

// becomeLeader starts sampling and a controller that starts cautious: a
// quarter of the last published budget.
func (e *Engine) becomeLeader(ctx context.Context) error {
	// The leader decides for the cluster on the holds every process
	// shares (Prepare sets them); a process's in-process holds pause only
	// its own jobs.
	ccfg := e.prepare(e.controller)
	// A recent publication is the cluster's budget a moment ago: start
	// cautious from it. An old one says nothing about now.
	// A critical pause the last leader was in goes on under this one: a
	// latched one whatever its age (only a person ends it), another if
	// recent.
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	prev, err := e.db().LastLeader(lctx)
	cancel()
	if err != nil {
		return err
	}
	last := prev.Budget
	if !prev.Recent {
		last = 0
	}
	// The controller starts at a quarter of it, but never below
	// min(it, InitialBudget), and raises it to InitialBudget at once on a
	// healthy primary: leaders that follow each other within seconds cannot
	// ratchet the cluster's budget down by a quarter each (see
	// throttle.Config.PreviousBudget).
	ccfg.PreviousBudget = last
	if cs := prev.Critical; cs.Signal != "" && cs.Since != nil && (cs.Latched || prev.Recent) {
		in := &throttle.CriticalState{Signal: cs.Signal, Since: *cs.Since, Latched: cs.Latched, Budget: cs.PauseBudget}
		if cs.Value != nil && cs.Threshold != nil {
			in.Value, in.Threshold = *cs.Value, *cs.Threshold
		}
		// The quiet the last leader saw counts on only if it published
		// a moment ago: a gap nobody watched is not quiet.
		if cs.QuietSince != nil && prev.Recent {
			in.QuietSince = *cs.QuietSince
		}
		ccfg.Inherited = in
		e.log.Warn("taking over a critical pause", "signal", cs.Signal, "since", *cs.Since, "latched", cs.Latched)
	}
	if e.ctl, err = throttle.New(ccfg); err != nil {
		return err
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stopPoller, e.pollerDone = stop, make(chan struct{})
	go func() {
		defer close(e.pollerDone)
		_ = e.poller.Run(pctx)
	}()
	e.leader, e.seen, e.known, e.lastLead, e.sampled = true, map[string][3]float64{}, map[throttle.Job]bool{}, time.Time{}, false
	e.isLeader.Store(true)
	e.log.Info("became leader", "worker", e.procID, "previous_budget", last)
	return nil
}

func (e *Engine) stepDown(why string) {
	if !e.leader {
		return
	}
	e.stopPoller()
	<-e.pollerDone
	e.leader = false
	e.isLeader.Store(false)
	e.publishDenied.Store(nil)
	e.log.Warn("stepped down as leader", "why", why)
}

// lead decides for every live worker in the cluster and publishes the
// allocations with a lease. It does not decide before the sampler has a
// fresh reading of the primary.
func (e *Engine) lead(ctx context.Context) {
	snap := e.poller.Snapshot()
	// A new leader decides nothing before its first fresh sample of the
	// primary. After that it decides every tick, stale signals included:
	// the controller then says stale (audited, paged), pays nothing out,
	// and restarts slowly when the signals return.
	if s, ok := snap.Get(signals.PrimaryLoad, nil); ok && s.Err == nil && !snap.Stale(s) {
		e.sampled = true
	}
	if !e.sampled {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	live, err := e.db().LiveWorkers(lctx, e.lease)
	if err != nil {
		e.publishFailed("cannot read workers", e.denied(err))
		return
	}
	// Jobs are the union of the live workers' jobs; their consumption is
	// the growth of each worker's counters.
	byJob := map[throttle.Job][]store.Live{}
	for _, w := range live {
		j := throttle.Job(w.Job)
		byJob[j] = append(byJob[j], w)
		last, seen := e.seen[w.ID]
		e.seen[w.ID] = [3]float64{w.Batches, w.Errors, w.DurationMs}
		if seen && w.Batches >= last[0] {
			n := int(w.Batches - last[0])
			e.ctl.ReportMany(j, n, int(w.Errors-last[1]), time.Duration((w.DurationMs-last[2])*float64(time.Millisecond)))
		}
		if w.Waiting {
			e.ctl.Wanted(j)
		}
	}
	for j, ws := range byJob {
		weight, minRate, maxRate := 0.0, 0.0, 0.0
		for _, w := range ws {
			weight, minRate, maxRate = max(weight, w.Weight), max(minRate, w.MinRate), max(maxRate, w.MaxRate)
		}
		tables, sigs := throttle.GateUnion(ws, func(w store.Live) ([]string, []string) { return w.Tables, w.Signals })
		if err := e.ctl.Register(throttle.JobConfig{Name: j, Weight: weight, MinRate: minRate, MaxRate: maxRate, Tables: tables, Signals: sigs}); err != nil {
			e.log.Warn("cannot register job", "job", j, "error", err)
		}
	}
	for j := range e.known {
		if _, ok := byJob[j]; !ok {
			e.ctl.Unregister(j)
			delete(e.known, j)
		}
	}
	for j := range byJob {
		e.known[j] = true
	}
	// Only a latched pause has a request to claim (RequestResume asks
	// only of a published latch, and publishing drops any other).
	if cs := e.ctl.Critical(); cs != nil && cs.Latched {
		e.claimResume(ctx, snap.At)
	}
	d := e.ctl.Step(snap.At, snap)
	e.published(d)
	pub := store.Publication{Leader: e.procID, Budget: d.Budget, Mode: string(d.Mode), Binding: d.Binding, Reason: d.Reason, Lease: e.lease}
	for j, ws := range byJob {
		jd := d.Jobs[j]
		n := float64(len(ws))
		for _, w := range ws {
			a := limit.Allocation{}
			state, code, reason := jd.State, jd.Code, jd.Reason
			if jd.Rate > 0 {
				a = limit.Allocation{Rate: jd.Rate / n, Burst: int(math.Max(1, math.Ceil(float64(jd.Burst)/n))),
					MaxInFlight: int(math.Max(1, math.Ceil(float64(jd.MaxInFlight)/n)))}
				if a.Rate < throttle.SlowRate && jd.Rate >= throttle.SlowRate {
					// The job runs, but this worker's share of it is too
					// small to start a batch within a few seconds.
					state, code, reason = throttle.JobThrottled, throttle.CodeTooSlow, throttle.SlowReason(a.Rate, fmt.Sprintf("this worker's share of %d; %s", len(ws), d.Reason))
				}
			}
			pub.Workers = append(pub.Workers, store.WorkerLease{ID: w.ID, Rate: a.Rate, Burst: int32(a.Burst), InFlight: int32(a.MaxInFlight),
				State: string(state), Code: string(code), Reason: reason})
		}
	}
	if cs := e.ctl.Critical(); cs != nil {
		pub.Critical = store.Critical{Signal: cs.Signal, Since: &cs.Since, Latched: cs.Latched, PauseBudget: cs.Budget}
		if cs.Threshold != 0 {
			pub.Critical.Value, pub.Critical.Threshold = &cs.Value, &cs.Threshold
		}
		if !cs.QuietSince.IsZero() {
			pub.Critical.QuietSince = &cs.QuietSince
		}
	}
	// One transaction: the leases are renewed only together with the
	// decision they come from (what a new leader takes over, a critical
	// pause included), or not at all, and then every worker stops at the
	// end of its lease.
	if err := e.db().Publish(lctx, pub); err != nil {
		e.publishFailed("cannot publish allocations", e.denied(err))
		return
	}
	if e.publishDenied.Swap(nil) != nil {
		e.log.Info("allocations published again")
	}
	e.lastLead = time.Now()
}

// publishFailed logs a leader's failed publication. A refused one is
// logged once, as an error, until a publication succeeds; this process's
// workers give it as their reason when their leases lapse.
func (e *Engine) publishFailed(msg string, err error) {
	var perm *permissionError
	if !errors.As(err, &perm) {
		e.log.Warn(msg, "error", err)
		return
	}
	if e.publishDenied.Swap(perm) == nil {
		e.log.Error("leader may not publish; workers pause when their leases lapse, until the coordination role is granted what it lacks",
			"step", msg, "error", err)
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

// RequestResume asks the leader, as actor, to end its latched critical
// pause; false when the last published decision is not latched.
func RequestResume(ctx context.Context, db store.DB, actor string) (bool, error) {
	return store.New(db).RequestResume(ctx, actor)
}
