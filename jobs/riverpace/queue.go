package riverpace

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// QueueClient is the part of a river.Client a [QueueGuard] uses.
type QueueClient interface {
	QueueGet(ctx context.Context, name string) (*rivertype.Queue, error)
	QueuePause(ctx context.Context, name string, opts *river.QueuePauseOpts) error
	QueueResume(ctx context.Context, name string, opts *river.QueuePauseOpts) error
	QueueUpdate(ctx context.Context, name string, params *river.QueueUpdateParams) (*rivertype.Queue, error)
}

// QueueGuardConfig configures a [QueueGuard].
type QueueGuardConfig struct {
	// Client is the River client whose queue is paused. Required.
	Client QueueClient
	// Queue is the queue to pause. It should hold only kinds this pacer
	// paces: River pauses a whole queue. Required.
	Queue string
	// Pacer is the pacer of the queue's jobs, which reports their status,
	// holds included (throttled.Client's pacers do). Required.
	Pacer status.Explainer
	// Threshold: a hold that keeps the job paused for longer than this
	// pauses the queue; a shorter one is left to the middleware, which
	// snoozes each job. Defaults to 1m.
	Threshold time.Duration
	// Interval is how often the pacer's status is read. Defaults to 1s.
	Interval time.Duration
	// Timeout bounds each call to River (one statement on the database).
	// Defaults to 5s.
	Timeout time.Duration
	// Logf, when set, is told of every pause, resume and failed call.
	Logf func(format string, args ...any)
}

// QueueGuard pauses a River queue (QueuePause) while a long hold applies
// to its jobs, and resumes it (QueueResume) when the hold ends: during a
// two-hour maintenance hold, River stops fetching the queue instead of
// snoozing each job every few seconds. River keeps the pause in the
// database, so every client working the queue honours it, one started
// during the pause included.
//
// The guard resumes only a pause it made: it marks the queue's metadata
// with the hold it paused for, and a guard started later (after a crash,
// in another process) resumes such a pause once no hold applies. A pause
// an operator made in River is never lifted. Run a guard in every
// process that works the queue: any of them resumes the queue.
//
// A guard that cannot read a status or reach the database leaves the
// queue as it is; the middleware still snoozes jobs while they are held.
type QueueGuard struct {
	cfg QueueGuardConfig
	now func() time.Time
}

// metaKey marks a pause the guard made in the queue's metadata.
const metaKey = "throttled_paused_for"

// NewQueueGuard returns a QueueGuard; call Run.
func NewQueueGuard(cfg QueueGuardConfig) (*QueueGuard, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("riverpace: QueueGuardConfig.Client is required")
	case cfg.Queue == "":
		return nil, errors.New("riverpace: QueueGuardConfig.Queue is required")
	case cfg.Queue == "*":
		return nil, errors.New(`riverpace: QueueGuardConfig.Queue "*" would pause every queue; name one`)
	case cfg.Pacer == nil:
		return nil, errors.New("riverpace: QueueGuardConfig.Pacer is required")
	case cfg.Threshold < 0 || cfg.Interval < 0 || cfg.Timeout < 0:
		return nil, errors.New("riverpace: QueueGuardConfig durations must not be negative")
	}
	cfg.Threshold = cmp.Or(cfg.Threshold, time.Minute)
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	cfg.Timeout = cmp.Or(cfg.Timeout, 5*time.Second)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &QueueGuard{cfg: cfg, now: time.Now}, nil
}

// Run guards the queue until ctx ends. It returns ctx's error; a pause
// it made stays (the next guard to run resumes it).
func (g *QueueGuard) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		if err := g.Step(ctx); err != nil && ctx.Err() == nil {
			g.cfg.Logf("riverpace: queue %s: %v", g.cfg.Queue, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Want is what the guard wants of the queue for status st at now: paused,
// and for which hold (its ID), when a hold keeps the job paused for
// longer than the threshold.
func (g *QueueGuard) Want(st status.JobStatus, now time.Time) (pause bool, holdID string) {
	if st.Code != status.CodeHeld {
		return false, ""
	}
	// The job runs again when the last pausing hold ends.
	var last hold.Hold
	for _, h := range hold.Pausing(st.Holds) {
		if h.Expires.After(last.Expires) {
			last = h
		}
	}
	if last.Expires.Sub(now) <= g.cfg.Threshold {
		return false, ""
	}
	return true, last.ID
}

// Step reads the pacer's status and the queue once and pauses or resumes
// the queue to match.
func (g *QueueGuard) Step(ctx context.Context) error {
	pause, hold := g.Want(g.cfg.Pacer.Status(), g.now())
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	q, err := g.cfg.Client.QueueGet(ctx, g.cfg.Queue)
	if err != nil && !errors.Is(err, river.ErrNotFound) {
		return fmt.Errorf("reading the queue: %w", err)
	}
	paused := q != nil && q.PausedAt != nil
	mine := q != nil && pausedFor(q.Metadata) != ""
	switch {
	case pause && !paused:
		// Mark first: a guard that dies between the two calls leaves a
		// mark on a running queue, which the next step clears or uses.
		if err := g.mark(ctx, q, hold); err != nil {
			return err
		}
		if err := g.cfg.Client.QueuePause(ctx, g.cfg.Queue, nil); err != nil {
			return fmt.Errorf("pausing the queue: %w", err)
		}
		g.cfg.Logf("riverpace: queue %s paused for hold %s (longer than %s)", g.cfg.Queue, hold, g.cfg.Threshold)
	case !pause && paused && mine:
		if err := g.cfg.Client.QueueResume(ctx, g.cfg.Queue, nil); err != nil {
			return fmt.Errorf("resuming the queue: %w", err)
		}
		if err := g.mark(ctx, q, ""); err != nil {
			return err
		}
		g.cfg.Logf("riverpace: queue %s resumed: no long hold applies", g.cfg.Queue)
	case !pause && !paused && mine:
		return g.mark(ctx, q, "")
	}
	return nil
}

// mark sets (hold != "") or clears the guard's mark in the queue's
// metadata, keeping every other key.
func (g *QueueGuard) mark(ctx context.Context, q *rivertype.Queue, hold string) error {
	meta := map[string]any{}
	if q != nil && len(q.Metadata) > 0 {
		if err := json.Unmarshal(q.Metadata, &meta); err != nil {
			meta = map[string]any{}
		}
	}
	if hold == "" {
		delete(meta, metaKey)
	} else {
		meta[metaKey] = hold
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if q == nil {
		// River creates a queue's row when a client first works it; a
		// queue no client has worked yet has nothing to mark or pause
		// beyond what QueuePause does.
		return nil
	}
	// River keeps the metadata it is given (an emptied map is {}); its
	// own refresh of the queue's row leaves the metadata alone.
	if _, err := g.cfg.Client.QueueUpdate(ctx, g.cfg.Queue, &river.QueueUpdateParams{Metadata: b}); err != nil {
		return fmt.Errorf("marking the queue: %w", err)
	}
	return nil
}

// pausedFor is the hold a guard paused the queue for, from its metadata.
func pausedFor(meta []byte) string {
	var m map[string]any
	if json.Unmarshal(meta, &m) != nil {
		return ""
	}
	s, _ := m[metaKey].(string)
	return s
}
