package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/throttled/throttled/status"
)

// State is a job's state.
type State string

// Job states.
const (
	StateRunning   State = "running"
	StateThrottled State = "throttled"
	StatePaused    State = "paused"
	StateDone      State = "done"
	StateFailed    State = "failed"
	// StateStopped: Run returned because its context ended.
	StateStopped State = "stopped"
)

// Status is a snapshot of a job's progress.
type Status struct {
	Job   string
	State State
	// Reason says why the job is held back, failed or stopped.
	Reason string
	// Code is why, for machines, when the pacer says: one of
	// throttle's closed set.
	Code status.Code
	// Binding is the signal holding the job back, when the pacer says.
	Binding status.Binding
	// Rate is the job's allocation, batches per second, when the pacer
	// says.
	Rate      float64
	BatchSize int
	LastBatch time.Duration
	Rows      int64
	Batches   int64
	Retries   int64
	Errors    int64
	LastError string
	// TargetBatchDuration is the duration the batch size adapts toward
	// now: Config.TargetBatchDuration, or less while a signal of the
	// foreground's latency binds the job (see Config.TargetBatchDuration).
	TargetBatchDuration time.Duration
	// Total is the rows expected (0 when unknown); ETA the time to do the
	// rest at the recent rate (0 when unknown).
	Total int64
	ETA   time.Duration
}

// Status returns the job's progress now. While the job runs, its state,
// reason, binding signal and rate come from the pacer when it is a
// status.Explainer: a paused job shows as paused, with the hold's reason.
func (j *Job) Status() Status {
	j.mu.Lock()
	s := j.status
	rowsPS := j.rowsPS
	j.mu.Unlock()
	if s.State == StateRunning {
		if ex, ok := j.pacer.(status.Explainer); ok {
			st := ex.Status()
			s.State, s.Code, s.Reason, s.Binding, s.Rate = State(st.State), st.Code, st.Reason, st.Binding, st.Rate
			switch s.State {
			case StateRunning, StateThrottled, StatePaused:
			default:
				s.State = StateRunning
			}
		}
		s.ETA = eta(s.Total, s.Rows, rowsPS)
	}
	return s
}

// Ticket is permission for one batch taken with [Job.Acquire]. Call Done
// exactly once when the batch ends.
type Ticket struct {
	j     *Job
	start time.Time
	done  func(rows int64, took time.Duration, err error)
}

// Acquire waits for permission to run one batch, for callers that drive
// their own loop (like rate.Limiter.Wait). Every attempt, retries
// included, must acquire its own ticket.
func (j *Job) Acquire(ctx context.Context) (*Ticket, error) {
	done, err := j.pacer.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobs: job %q: %w", j.cfg.Name, err)
	}
	return &Ticket{j: j, start: time.Now(), done: done}, nil
}

// TryAcquire is Acquire's non-blocking twin (like rate.Limiter.Allow): it
// reports false at once when the job may not start a batch now, or when
// the pacer cannot grant without waiting.
func (j *Job) TryAcquire() (*Ticket, bool) {
	a, ok := j.pacer.(Allower)
	if !ok {
		return nil, false
	}
	done, ok := a.Allow()
	if !ok {
		return nil, false
	}
	return &Ticket{j: j, start: time.Now(), done: done}, true
}

// Done reports the batch's rows and error, and returns the batch size to
// use next.
func (t *Ticket) Done(rows int64, err error) int {
	took := time.Since(t.start)
	t.done(rows, took, err)
	if err != nil {
		t.j.failed(err)
	} else {
		t.j.succeeded(Result{Rows: rows}, took)
	}
	return t.j.batchSize()
}
