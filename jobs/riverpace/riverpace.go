// Package riverpace paces River (github.com/riverqueue/river) jobs through
// the same pacer as the jobs library. Install [Middleware] on a River
// client (river.Config.Middleware): each job waits for its pacer before
// it is worked, reports its outcome back, and while its pacer is paused
// it is snoozed instead of waiting, which frees the worker slot and does
// not burn an attempt.
//
// For long holds (a two-hour maintenance pause), run a [QueueGuard]
// beside the client: it pauses the River queue itself (QueuePause), so
// River stops fetching its jobs, and resumes it when the hold ends. Short
// holds are left to the snoozes.
package riverpace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
)

// Config configures a [Middleware].
type Config struct {
	// PacerFor returns the pacer for a job, or nil to work the job
	// unpaced (for kinds throttled does not manage). A pacer that is also
	// a status.Explainer (throttled.Client's are) snoozes its job at once
	// while paused. Required.
	PacerFor func(job *rivertype.JobRow) jobs.Pacer
	// MaxWait is how long a job waits for permission before it is
	// snoozed, so a throttled queue does not hold its worker slots.
	// Defaults to 5s.
	MaxWait time.Duration
	// Snooze is how long a paused (or long-throttled) job is snoozed.
	// Defaults to 15s.
	Snooze time.Duration
}

// Middleware paces River jobs. It is safe for concurrent use.
type Middleware struct {
	river.MiddlewareDefaults
	cfg Config
}

var _ rivertype.WorkerMiddleware = (*Middleware)(nil)

// New returns a Middleware.
func New(cfg Config) (*Middleware, error) {
	if cfg.PacerFor == nil {
		return nil, errors.New("riverpace: Config.PacerFor is required")
	}
	if cfg.MaxWait < 0 || cfg.Snooze < 0 {
		return nil, errors.New("riverpace: MaxWait and Snooze must not be negative")
	}
	cfg.MaxWait = cmp.Or(cfg.MaxWait, 5*time.Second)
	cfg.Snooze = cmp.Or(cfg.Snooze, 15*time.Second)
	return &Middleware{cfg: cfg}, nil
}

// Work waits for the job's pacer, works the job and reports the outcome.
// A paused pacer, or one that grants nothing within MaxWait, snoozes the
// job.
func (m *Middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(ctx context.Context) error) error {
	p := m.cfg.PacerFor(job)
	if p == nil {
		return doInner(ctx)
	}
	if ex, ok := p.(status.Explainer); ok {
		if ex.Status().State == status.JobPaused {
			return river.JobSnooze(m.cfg.Snooze)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, m.cfg.MaxWait)
	done, err := p.Wait(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return river.JobSnooze(m.cfg.Snooze)
	}
	start := time.Now()
	// The slot goes back however the job ends, a panic included (River
	// recovers from it and carries on; a slot kept would starve the kind).
	reported := false
	defer func() {
		if reported {
			return
		}
		r := recover()
		done(0, time.Since(start), fmt.Errorf("riverpace: job panicked: %v", r))
		panic(r) // on to River, which reports it
	}()
	err = doInner(ctx)
	reported = true
	done(0, time.Since(start), err)
	return err
}
