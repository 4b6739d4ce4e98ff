package throttled

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// leaderLockKey is the session advisory lock the leader holds ("thrldr").
const leaderLockKey = 0x7468726c6472

// DefaultLease is how long a published allocation stays valid, at the
// least (see leaseFor).
const DefaultLease = 3 * time.Second

// heartbeatEvery is how often a worker reports and reads its allocation.
const heartbeatEvery = 500 * time.Millisecond

// Tables of coordinated mode and the privileges its role needs on each.
const (
	workersTable = "throttled.workers"
	leaderTable  = "throttled.leader"
)

var tablePrivileges = map[string]string{
	workersTable: "SELECT, INSERT, UPDATE, DELETE",
	leaderTable:  "SELECT, INSERT, UPDATE",
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

// denied turns err into a permissionError on table when the server
// refused it for want of a privilege, and returns any other error as is.
func (co *coordinator) denied(err error, table string) error {
	var perm *permissionError
	var pgErr *pgconn.PgError
	if !errors.As(err, &perm) && errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return &permissionError{role: co.c.coord.Config().ConnConfig.User, table: table, err: err}
	}
	return err
}

// Pacer is what the Client hands out per job: permission for one batch,
// feedback after it, and why the job is held back. It satisfies the jobs
// package's Pacer, Allower and Explainer.
type Pacer interface {
	Wait(ctx context.Context) (func(rows int64, took time.Duration, err error), error)
	Allow() (func(rows int64, took time.Duration, err error), bool)
	Explain() (state, reason, binding string, rate float64)
}

// worker is one job of this process in coordinated mode: a row in
// throttled.workers, a local limiter and the consumption it reports.
type worker struct {
	id      string
	cfg     jobs.Config
	l       *throttle.Limiter
	batches atomic.Int64
	errors  atomic.Int64
	durUs   atomic.Int64

	mu                     sync.Mutex
	state, reason, binding string
	rate                   float64
	unavailable            bool        // paused because no valid allocation can be had
	expiry                 *time.Timer // pauses the worker when its lease lapses
	stopped                bool        // removed: no lease applies again
	granted                bool        // a running allocation was applied once
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
	return w.unavailable
}

// lapse pauses the worker for want of an allocation.
func (w *worker) lapse(reason string) {
	w.l.Pause(reason)
	w.mu.Lock()
	w.state, w.reason, w.rate, w.unavailable = string(throttle.JobPaused), reason, 0, true
	w.mu.Unlock()
}

// lease applies a valid allocation until remaining has passed: a timer
// pauses the worker then unless a heartbeat renews it first, so a worker
// never works past its lease, however slow its heartbeats.
func (w *worker) lease(a throttle.Allocation, remaining time.Duration, state, reason, binding string) {
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
	w.state, w.reason, w.binding, w.rate, w.unavailable = state, reason, binding, a.Rate, false
	if !w.granted && a.Rate > 0 && state == string(throttle.JobRunning) {
		// A new worker's bucket starts empty, so its first batch would
		// wait 1/rate: minutes at a small share. Its first allocation
		// takes effect as of one token ago, so the first batch starts at
		// once and the rate paces the ones after it.
		w.granted = true
		w.l.ApplyAt(time.Now().Add(-time.Duration(float64(time.Second)/a.Rate)), a)
	} else {
		w.l.Apply(a)
	}
	if state == string(throttle.JobPaused) {
		w.l.Pause(reason)
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

func (w *worker) done(g throttle.Grant) func(int64, time.Duration, error) {
	var once sync.Once
	return func(_ int64, took time.Duration, err error) {
		once.Do(func() {
			g.Release()
			w.batches.Add(1)
			w.durUs.Add(took.Microseconds())
			if err != nil {
				w.errors.Add(1)
			}
		})
	}
}

func (w *worker) Explain() (state, reason, binding string, rate float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state, w.reason, w.binding, w.rate
}

func (w *worker) set(state, reason, binding string, rate float64) {
	w.mu.Lock()
	w.state, w.reason, w.binding, w.rate = state, reason, binding, rate
	w.mu.Unlock()
}

// coordinator runs the coordinated mode of a Client: every process is a
// worker; the one holding the advisory lock is also the leader.
type coordinator struct {
	c        *Client
	opts     Options
	procID   string
	lease    time.Duration
	election *pgx.Conn // the leader's lock lives on this session

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

func newCoordinator(c *Client, opts Options) *coordinator {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return &coordinator{c: c, opts: opts, procID: fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b)),
		lease: leaseFor(c.tick), workers: map[throttle.Job]*worker{}, seen: map[string][3]float64{}}
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

// leaseFor is the lease for a leader deciding every tick: DefaultLease,
// or three ticks when that is longer, so a healthy leader's allocations
// never lapse between its publications.
func leaseFor(tick time.Duration) time.Duration {
	return max(DefaultLease, 3*tick)
}

// register adds a job of this process as a worker row.
func (co *coordinator) register(ctx context.Context, cfg jobs.Config) (*worker, error) {
	co.mu.Lock()
	defer co.mu.Unlock()
	j := throttle.Job(cfg.Name)
	if w, ok := co.workers[j]; ok {
		return w, nil
	}
	w := &worker{id: co.procID + "/" + cfg.Name, cfg: cfg, l: throttle.NewLimiter(j, nil)}
	w.lapse("waiting for the leader's first allocation")
	if err := co.upsert(ctx, w); err != nil {
		return nil, err
	}
	co.workers[j] = w
	return w, nil
}

// update changes a registered job's weight and rate limits.
func (co *coordinator) update(ctx context.Context, cfg jobs.Config) error {
	co.mu.Lock()
	w, ok := co.workers[throttle.Job(cfg.Name)]
	co.mu.Unlock()
	if !ok {
		return fmt.Errorf("throttled: job %q is not registered", cfg.Name)
	}
	w.mu.Lock()
	w.cfg.Weight, w.cfg.MinRate, w.cfg.MaxRate = cfg.Weight, cfg.MinRate, cfg.MaxRate
	w.mu.Unlock()
	return co.upsert(ctx, w)
}

// remove stops a job of this process and deletes its worker row.
func (co *coordinator) remove(ctx context.Context, j throttle.Job) error {
	co.mu.Lock()
	w, ok := co.workers[j]
	delete(co.workers, j)
	co.mu.Unlock()
	if !ok {
		return nil
	}
	w.stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := co.c.coord.Exec(ctx, "DELETE FROM throttled.workers WHERE id = $1", w.id)
	return err
}

func (co *coordinator) upsert(ctx context.Context, w *worker) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	w.mu.Lock()
	weight, minRate, maxRate := max(w.cfg.Weight, 0), w.cfg.MinRate, w.cfg.MaxRate
	w.mu.Unlock()
	_, err := co.c.coord.Exec(ctx, `INSERT INTO throttled.workers (id, job, weight, min_rate, max_rate) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), weight = $3, min_rate = $4, max_rate = $5`, w.id, w.cfg.Name, weight, minRate, maxRate)
	if err != nil {
		return fmt.Errorf("throttled: register worker %s: %w", w.id, co.denied(err, workersTable))
	}
	return nil
}

// run heartbeats, keeps or seeks leadership, and leads, until ctx ends.
func (co *coordinator) run(ctx context.Context) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	defer co.stepDown("client closing")
	for {
		co.applyPending()
		co.heartbeat(ctx)
		co.elect(ctx)
		if co.leader && time.Since(co.lastLead) >= co.c.tick-heartbeatEvery/2 {
			co.lead(ctx)
		}
		var changed <-chan struct{}
		if co.c.watcher != nil {
			changed = co.c.watcher.Changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
			// A hold came or went: every worker applies it now; the
			// leader republishes at once.
			co.lastLead = time.Time{}
		}
	}
}

// reconfigure queues a new controller configuration for run to apply.
func (co *coordinator) reconfigure(cfg throttle.Config) {
	co.mu.Lock()
	co.pending = &cfg
	co.mu.Unlock()
}

// applyPending swaps in a reloaded controller configuration. A leader
// rebuilds its controller at its current budget: a reload changes rules,
// not the pace.
func (co *coordinator) applyPending() {
	co.mu.Lock()
	p := co.pending
	co.pending = nil
	co.mu.Unlock()
	if p == nil {
		return
	}
	co.opts.Controller = *p
	if !co.leader {
		return
	}
	ccfg := withResolution(*p, co.opts.Cores)
	ccfg.Holds = co.c.durable
	// The same controller, new rules: its state (a critical pause,
	// latched or not, the budget, what it learned) carries over.
	if err := co.ctl.Reconfigure(ccfg); err != nil {
		co.c.log.Error("reloaded controller configuration refused", "error", err)
	}
}

// claimResume takes a person's request to resume a latched critical
// pause, if one waits, and hands it to the controller.
func (co *coordinator) claimResume(ctx context.Context, now time.Time) {
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var by string
	err := co.c.coord.QueryRow(lctx, `UPDATE throttled.leader SET resume_requested_at = NULL, resume_by = NULL
		WHERE id = 1 AND resume_requested_at IS NOT NULL RETURNING coalesce(resume_by, '')`).Scan(&by)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		co.c.log.Warn("cannot read resume requests", "error", co.denied(err, leaderTable))
	case co.ctl.Resume(now, by):
		co.c.log.Warn("latched critical pause resumed", "by", by)
	default:
		co.c.log.Info("a resume request found no latched critical pause", "by", by)
	}
}

// heartbeat reports each local worker's consumption, reads back its
// allocation and applies it, every worker at once. A valid lease is
// applied until it lapses (a timer pauses the worker then); a failed
// heartbeat or an expired lease pauses it now. Any hold this process
// knows of (durable, in-process, or configured) pauses it at once, leader
// or not.
func (co *coordinator) heartbeat(ctx context.Context) {
	co.mu.Lock()
	ws := make([]*worker, 0, len(co.workers))
	for _, w := range co.workers {
		ws = append(ws, w)
	}
	co.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { co.beat(ctx, w) })
	}
	wg.Wait()
}

func (co *coordinator) beat(ctx context.Context, w *worker) {
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	var a throttle.Allocation
	var remaining float64
	var state, reason, binding string
	err := co.c.coord.QueryRow(hctx, `UPDATE throttled.workers
		SET heartbeat_at = now(), batches = $2, errors = $3, duration_ms = $4
		WHERE id = $1
		RETURNING alloc_rate, alloc_burst, alloc_inflight, CASE WHEN lease_until > now() THEN extract(epoch FROM lease_until - now())::float8 ELSE 0 END, state, reason, binding`,
		w.id, w.batches.Load(), w.errors.Load(), float64(w.durUs.Load())/1000).
		Scan(&a.Rate, &a.Burst, &a.MaxInFlight, &remaining, &state, &reason, &binding)
	cancel()
	if w.isStopped() {
		return // removed while this heartbeat was in flight
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = co.upsert(ctx, w) // removed as stale while we could not reach it
		remaining = 0
	}
	err = co.denied(err, workersTable)
	var perm *permissionError
	switch {
	case errors.As(err, &perm):
		if !co.beatDenied.Swap(true) {
			co.c.log.Error("heartbeat refused: workers pause until the coordination role is granted what it lacks", "error", err)
		}
	case err == nil && co.beatDenied.CompareAndSwap(true, false):
		co.c.log.Info("heartbeats accepted again")
	}
	if hs := co.c.sources.Applying(time.Now(), throttle.Job(w.cfg.Name)); len(hs) > 0 {
		// Holds that cannot be confirmed say so first, whatever else
		// applies: the state is unknown, not merely held.
		if i := slices.IndexFunc(hs, func(h throttle.Hold) bool { return h.ID == holds.UnconfirmedHoldID }); i > 0 {
			hs[0], hs[i] = hs[i], hs[0]
		}
		reason := "paused: hold " + hs[0].ID + ": " + hs[0].Reason
		w.l.Pause(reason)
		w.mu.Lock()
		w.state, w.reason, w.rate = string(throttle.JobPaused), reason, 0
		w.unavailable = hs[0].ID == holds.UnconfirmedHoldID
		w.mu.Unlock()
		return
	}
	switch {
	case perm != nil:
		w.lapse("no allocation: " + err.Error())
	case err != nil:
		w.lapse("no allocation: cannot reach the coordination database: " + err.Error())
	case remaining <= 0 || math.IsNaN(remaining) || math.IsInf(remaining, 0):
		if pd := co.publishDenied.Load(); pd != nil && co.isLeader.Load() {
			w.lapse("allocation lease expired: this process leads but may not publish: " + pd.Error())
			return
		}
		w.lapse("allocation lease expired: no leader renewed it")
	default:
		w.lease(a, time.Duration(remaining*float64(time.Second)), state, reason, binding)
	}
}

// elect keeps the lock if it has it, or tries to take it.
func (co *coordinator) elect(ctx context.Context) {
	ectx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if co.election == nil || co.election.IsClosed() {
		co.stepDown("lost the election session")
		conn, err := pgx.ConnectConfig(ectx, co.c.coord.Config().ConnConfig.Copy())
		if err != nil {
			return
		}
		co.election = conn
	}
	if co.leader {
		if _, err := co.election.Exec(ectx, "SELECT 1"); err != nil {
			co.election.Close(context.WithoutCancel(ctx))
			co.election = nil
			co.stepDown("leader session lost: " + err.Error())
		}
		return
	}
	var got bool
	if err := co.election.QueryRow(ectx, "SELECT pg_try_advisory_lock($1)", int64(leaderLockKey)).Scan(&got); err != nil {
		co.election.Close(context.WithoutCancel(ctx))
		co.election = nil
		return
	}
	if got {
		if err := co.becomeLeader(ctx); err != nil {
			co.c.log.Warn("cannot lead", "error", err)
			co.election.Close(context.WithoutCancel(ctx)) // releases the lock
			co.election = nil
		}
	}
}

// becomeLeader starts sampling and a controller that starts cautious: a
// quarter of the last published budget.
func (co *coordinator) becomeLeader(ctx context.Context) error {
	ccfg := withResolution(co.opts.Controller, co.opts.Cores)
	// The leader decides for the cluster on the holds every process
	// shares; a process's in-process holds pause only its own jobs.
	ccfg.Holds = co.c.durable
	// A recent publication is the cluster's budget a moment ago: start
	// cautious from it. An old one says nothing about now.
	// A critical pause the last leader was in goes on under this one: a
	// latched one whatever its age (only a person ends it), another if
	// recent.
	var last, pauseBudget float64
	var value, threshold *float64
	var recent, latched bool
	var signal string
	var since, quietSince *time.Time
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	err := co.c.coord.QueryRow(lctx, `SELECT budget, published_at > now() - interval '1 minute', critical_signal, critical_since, latched, pause_budget,
			critical_value, critical_threshold, critical_quiet_since
		FROM throttled.leader WHERE id = 1`).Scan(&last, &recent, &signal, &since, &latched, &pauseBudget, &value, &threshold, &quietSince)
	cancel()
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if !recent {
		last = 0
	}
	// The controller starts at a quarter of it, but never below
	// min(it, InitialBudget), and raises it to InitialBudget at once on a
	// healthy primary: leaders that follow each other within seconds cannot
	// ratchet the cluster's budget down by a quarter each (see
	// throttle.Config.PreviousBudget).
	ccfg.PreviousBudget = last
	if signal != "" && since != nil && (latched || recent) {
		in := &throttle.CriticalState{Signal: signal, Since: *since, Latched: latched, Budget: pauseBudget}
		if value != nil && threshold != nil {
			in.Value, in.Threshold = *value, *threshold
		}
		// The quiet the last leader saw counts on only if it published
		// a moment ago: a gap nobody watched is not quiet.
		if quietSince != nil && recent {
			in.QuietSince = *quietSince
		}
		ccfg.Inherited = in
		co.c.log.Warn("taking over a critical pause", "signal", signal, "since", *since, "latched", latched)
	}
	if co.ctl, err = throttle.New(ccfg); err != nil {
		return err
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	co.stopPoller, co.pollerDone = stop, make(chan struct{})
	go func() {
		defer close(co.pollerDone)
		_ = co.c.poller.Run(pctx)
	}()
	co.leader, co.seen, co.known, co.lastLead, co.sampled = true, map[string][3]float64{}, map[throttle.Job]bool{}, time.Time{}, false
	co.isLeader.Store(true)
	co.c.log.Info("became leader", "worker", co.procID, "previous_budget", last)
	return nil
}

func (co *coordinator) stepDown(why string) {
	if !co.leader {
		return
	}
	co.stopPoller()
	<-co.pollerDone
	co.leader = false
	co.isLeader.Store(false)
	co.publishDenied.Store(nil)
	co.c.log.Warn("stepped down as leader", "why", why)
}

type liveWorker struct {
	id, job                                   string
	weight, minRate, maxRate, batches, errors float64
	durationMs                                float64
}

// lead decides for every live worker in the cluster and publishes the
// allocations with a lease. It does not decide before the sampler has a
// fresh reading of the primary.
func (co *coordinator) lead(ctx context.Context) {
	snap := co.c.poller.Snapshot()
	// A new leader decides nothing before its first fresh sample of the
	// primary. After that it decides every tick, stale signals included:
	// the controller then says stale (audited, paged), pays nothing out,
	// and restarts slowly when the signals return.
	if s, ok := snap.Get(signals.PrimaryLoad, nil); ok && s.Err == nil && !snap.Stale(s) {
		co.sampled = true
	}
	if !co.sampled {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	rows, err := co.c.coord.Query(lctx, `SELECT id, job, weight, min_rate, max_rate, batches, errors, duration_ms
		FROM throttled.workers WHERE heartbeat_at > now() - make_interval(secs => $1)`, co.lease.Seconds())
	if err != nil {
		co.publishFailed("cannot read workers", co.denied(err, workersTable))
		return
	}
	live, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (liveWorker, error) {
		var w liveWorker
		var b, e int64
		err := r.Scan(&w.id, &w.job, &w.weight, &w.minRate, &w.maxRate, &b, &e, &w.durationMs)
		w.batches, w.errors = float64(b), float64(e)
		return w, err
	})
	if err != nil {
		co.publishFailed("cannot read workers", co.denied(err, workersTable))
		return
	}
	// Jobs are the union of the live workers' jobs; their consumption is
	// the growth of each worker's counters.
	byJob := map[throttle.Job][]liveWorker{}
	for _, w := range live {
		j := throttle.Job(w.job)
		byJob[j] = append(byJob[j], w)
		last, seen := co.seen[w.id]
		co.seen[w.id] = [3]float64{w.batches, w.errors, w.durationMs}
		if seen && w.batches >= last[0] {
			n := int(w.batches - last[0])
			co.ctl.ReportMany(j, n, int(w.errors-last[1]), time.Duration((w.durationMs-last[2])*float64(time.Millisecond)))
		}
	}
	for j, ws := range byJob {
		weight, minRate, maxRate := 0.0, 0.0, 0.0
		for _, w := range ws {
			weight, minRate, maxRate = max(weight, w.weight), max(minRate, w.minRate), max(maxRate, w.maxRate)
		}
		if err := co.ctl.Register(throttle.JobConfig{Name: j, Weight: weight, MinRate: minRate, MaxRate: maxRate}); err != nil {
			co.c.log.Warn("cannot register job", "job", j, "error", err)
		}
	}
	for j := range co.known {
		if _, ok := byJob[j]; !ok {
			co.ctl.Unregister(j)
			delete(co.known, j)
		}
	}
	for j := range byJob {
		co.known[j] = true
	}
	// Only a latched pause has a request to claim (RequestResume asks
	// only of a published latch, and publishing drops any other).
	if cs := co.ctl.Critical(); cs != nil && cs.Latched {
		co.claimResume(ctx, snap.At)
	}
	d := co.ctl.Step(snap.At, snap)
	co.c.published(d)
	var ids, states, reasons []string
	var rates []float64
	var bursts, inflights []int32
	for j, ws := range byJob {
		jd := d.Jobs[j]
		n := float64(len(ws))
		for _, w := range ws {
			a := throttle.Allocation{}
			state, reason := jd.State, jd.Reason
			if jd.Rate > 0 {
				a = throttle.Allocation{Rate: jd.Rate / n, Burst: int(math.Max(1, math.Ceil(float64(jd.Burst)/n))),
					MaxInFlight: int(math.Max(1, math.Ceil(float64(jd.MaxInFlight)/n)))}
				if a.Rate < throttle.SlowRate && jd.Rate >= throttle.SlowRate {
					// The job runs, but this worker's share of it is too
					// small to start a batch within a few seconds.
					state, reason = throttle.JobThrottled, throttle.SlowReason(a.Rate, fmt.Sprintf("this worker's share of %d; %s", len(ws), d.Reason))
				}
			}
			ids, rates, states, reasons = append(ids, w.id), append(rates, a.Rate), append(states, string(state)), append(reasons, reason)
			bursts, inflights = append(bursts, int32(a.Burst)), append(inflights, int32(a.MaxInFlight))
		}
	}
	var signal string
	var since, quietSince *time.Time
	var value, threshold *float64
	var latched bool
	var pauseBudget float64
	if cs := co.ctl.Critical(); cs != nil {
		signal, since, latched, pauseBudget = cs.Signal, &cs.Since, cs.Latched, cs.Budget
		if cs.Threshold != 0 {
			value, threshold = &cs.Value, &cs.Threshold
		}
		if !cs.QuietSince.IsZero() {
			quietSince = &cs.QuietSince
		}
	}
	// One batch is one implicit transaction: the leases are renewed only
	// together with the decision they come from (what a new leader takes
	// over, a critical pause included), or not at all, and then every
	// worker stops at the end of its lease.
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO throttled.leader (id, leader, budget, mode, binding, reason, published_at,
			critical_signal, critical_since, latched, pause_budget, critical_value, critical_threshold, critical_quiet_since)
			VALUES (1, $1, $2, $3, $4, $5, now(), $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (id) DO UPDATE SET leader = $1, budget = $2, mode = $3, binding = $4, reason = $5, published_at = now(),
			critical_signal = $6, critical_since = $7, latched = $8, pause_budget = $9,
			critical_value = $10, critical_threshold = $11, critical_quiet_since = $12,
			resume_requested_at = CASE WHEN $8 THEN throttled.leader.resume_requested_at END,
			resume_by = CASE WHEN $8 THEN throttled.leader.resume_by END`,
		co.procID, d.Budget, string(d.Mode), d.Binding, d.Reason, signal, since, latched, pauseBudget, value, threshold, quietSince)
	b.Queue(`UPDATE throttled.workers w SET alloc_rate = u.rate, alloc_burst = u.burst, alloc_inflight = u.inflight,
			lease_until = now() + make_interval(secs => $7), state = u.state, reason = u.reason, binding = $8
		FROM unnest($1::text[], $2::float8[], $3::int[], $4::int[], $5::text[], $6::text[]) AS u(id, rate, burst, inflight, state, reason)
		WHERE w.id = u.id`, ids, rates, bursts, inflights, states, reasons, co.lease.Seconds(), d.Binding)
	b.Queue("DELETE FROM throttled.workers WHERE heartbeat_at < now() - interval '1 minute'")
	if err := co.publish(lctx, b, leaderTable, workersTable, workersTable); err != nil {
		co.publishFailed("cannot publish allocations", err)
		return
	}
	if co.publishDenied.Swap(nil) != nil {
		co.c.log.Info("allocations published again")
	}
	co.lastLead = time.Now()
}

// publish sends b, whose statements write tables in order, and returns
// the first failure, as a permissionError when it is one.
func (co *coordinator) publish(ctx context.Context, b *pgx.Batch, tables ...string) error {
	br := co.c.coord.SendBatch(ctx, b)
	for _, table := range tables {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return co.denied(err, table)
		}
	}
	return br.Close()
}

// publishFailed logs a leader's failed publication. A refused one is
// logged once, as an error, until a publication succeeds; this process's
// workers give it as their reason when their leases lapse.
func (co *coordinator) publishFailed(msg string, err error) {
	var perm *permissionError
	if !errors.As(err, &perm) {
		co.c.log.Warn(msg, "error", err)
		return
	}
	if co.publishDenied.Swap(perm) == nil {
		co.c.log.Error("leader may not publish; workers pause when their leases lapse, until the coordination role is granted what it lacks",
			"step", msg, "error", err)
	}
}

// unregister removes this process's worker rows.
func (co *coordinator) unregister() {
	co.mu.Lock()
	defer co.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, w := range co.workers {
		_, _ = co.c.coord.Exec(ctx, "DELETE FROM throttled.workers WHERE id = $1", w.id)
	}
	if co.election != nil {
		co.election.Close(ctx)
	}
}

var (
	_ Pacer = (*worker)(nil)
	_ Pacer = (*throttle.Pacer)(nil)
)

// ErrNotLatched is a resume asked of a cluster in no latched critical
// pause.
var ErrNotLatched = errors.New("throttled: no latched critical pause to resume")

// RequestResume asks the cluster's leader to end its latched critical
// pause, as actor (audited with reason). The leader acts on its next
// decision, within a tick; the pause then ends as any critical pause
// does, once the signals are calm. ErrNotLatched when the last published
// decision is not latched.
func RequestResume(ctx context.Context, db *pgxpool.Pool, store *holds.Store, actor, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tag, err := db.Exec(ctx, `UPDATE throttled.leader SET resume_requested_at = now(), resume_by = $1 WHERE id = 1 AND latched`, actor)
	if err != nil {
		return fmt.Errorf("throttled: request a resume: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotLatched
	}
	if reason == "" {
		reason = "no reason given"
	}
	return store.Audit(ctx, holds.Entry{Event: holds.EventMode, Actor: actor, Source: string(throttle.SourceManual),
		Reason: "resume of the latched critical pause requested: " + reason})
}

// ResumeLatched ends a latched critical pause as actor: at once in this
// process's controller, or, in coordinated mode, through the leader
// (RequestResume).
func (c *Client) ResumeLatched(ctx context.Context, actor, reason string) error {
	if c.co == nil {
		if !c.ctl.Resume(time.Now(), actor) {
			return ErrNotLatched
		}
		return nil
	}
	return RequestResume(ctx, c.coord, c.store, actor, reason)
}
