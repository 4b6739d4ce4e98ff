package coord

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
	"github.com/throttled/throttled/throttle/limit"
)

// worker.go: this process's workers: registration, the heartbeat that
// reports each one's consumption and reads its lease, and the lease
// applied to its limiter until it lapses.

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
	st      status.JobStatus // CodeUnavailable: paused because no valid allocation can be had
	expiry  *time.Timer      // pauses the worker when its lease lapses
	stopped bool             // removed: no lease applies again
	granted bool             // a running allocation was applied once
}

// newWorker returns the worker id of job cfg.Name, paused until its first
// lease.
func newWorker(id string, cfg jobs.Config) *worker {
	j := status.Job(cfg.Name)
	w := &worker{id: id, cfg: cfg, l: limit.New(string(j), nil), st: status.JobStatus{Job: j}}
	w.lapse("waiting for the leader's first allocation")
	return w
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
	return w.st.Code == status.CodeUnavailable
}

// lapse pauses the worker for want of an allocation.
func (w *worker) lapse(reason string) {
	w.l.Pause(reason)
	w.mu.Lock()
	w.st = status.JobStatus{Job: w.st.Job, State: status.JobPaused, Code: status.CodeUnavailable, Reason: reason}
	w.mu.Unlock()
}

// lease applies a valid allocation until remaining has passed: a timer
// pauses the worker then unless a heartbeat renews it first, so a worker
// never works past its lease, however slow its heartbeats.
func (w *worker) lease(a limit.Allocation, remaining time.Duration, st status.JobStatus) {
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
	if !w.granted && a.Rate > 0 && st.State != status.JobPaused {
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
		if st.State != status.JobRunning && st.Code != status.CodeScaled && st.Code != status.CodeExempt {
			ago = mrand.Float64()
		}
		w.granted = true
		w.l.ApplyAt(time.Now().Add(-time.Duration(ago*float64(time.Second)/a.Rate)), a)
	} else {
		w.l.Apply(a)
	}
	if st.State == status.JobPaused {
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

// Take takes a token of the worker's limiter with no in-flight slot, for
// work this process never sees end (a freno client's chunk after its
// check), and counts it as one batch of no rows and no time in the next
// heartbeat (see pacing.LimiterPacer.Take).
func (w *worker) Take() bool {
	if !w.l.Take() {
		return false
	}
	w.batches.Add(1)
	return true
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

func (w *worker) Status() status.JobStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.Holds = slices.Clone(st.Holds)
	return st
}

// Register adds a job of this process as a worker row and returns its
// worker: a pacer that applies its lease.
func (e *Engine) Register(ctx context.Context, cfg jobs.Config) (*worker, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := status.Job(cfg.Name)
	if w, ok := e.workers[j]; ok {
		return w, nil
	}
	w := newWorker(e.procID+"/"+cfg.Name, cfg)
	if err := e.upsert(ctx, w); err != nil {
		return nil, err
	}
	e.workers[j] = w
	e.work.add(w.l)
	return w, nil
}

// Update changes a registered job's weight and rate limits.
func (e *Engine) Update(ctx context.Context, cfg jobs.Config) error {
	e.mu.Lock()
	w, ok := e.workers[status.Job(cfg.Name)]
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
func (e *Engine) Remove(ctx context.Context, j status.Job) error {
	e.mu.Lock()
	w, ok := e.workers[j]
	delete(e.workers, j)
	e.mu.Unlock()
	if !ok {
		return nil
	}
	e.work.remove(w.l)
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

// Status is job j's worker's status: unavailable when this process runs
// no worker of it.
func (e *Engine) Status(j status.Job) status.JobStatus {
	e.mu.Lock()
	w, ok := e.workers[j]
	e.mu.Unlock()
	if !ok {
		return status.JobStatus{Job: j, State: status.JobPaused, Code: status.CodeUnavailable, Reason: "no worker of this job in this process"}
	}
	return w.Status()
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
	secs := e.limitedSeconds(status.Job(job))
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
	known := e.holds.Applying(time.Now(), w.cfg.Name)
	if hs := hold.Pausing(known); len(hs) > 0 {
		// Holds that cannot be confirmed say so first, whatever else
		// applies: the state is unknown, not merely held.
		if i := slices.IndexFunc(hs, func(h hold.Hold) bool { return h.ID == holds.UnconfirmedHoldID }); i > 0 {
			hs[0], hs[i] = hs[i], hs[0]
		}
		st := status.Held(status.Job(w.cfg.Name), hs)
		if hs[0].ID == holds.UnconfirmedHoldID {
			st.Code = status.CodeUnavailable
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
		st := status.JobStatus{State: status.JobState(lease.State), Code: status.Code(lease.Code), Reason: lease.Reason, Binding: fromStore(lease.Binding)}
		st.Code = status.CodeFor(st.State, st.Code) // a row an older leader wrote has none, or a stale one
		a := limit.Allocation{Rate: lease.Rate, Burst: lease.Burst, MaxInFlight: lease.MaxInFlight}
		// Ratio holds scale this worker's lease here, whichever process
		// placed them: the leader's allocations are unscaled.
		if _, by := hold.Scale(known); by != nil && a.Rate > 0 {
			a.Rate *= by.Ratio
			st.Rate = lease.Rate
			st = status.Scaled(st, *by)
		}
		w.lease(a, lease.Remaining, st)
	}
}
