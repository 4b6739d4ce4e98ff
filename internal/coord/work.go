package coord

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttled/throttled/throttle/limit"
)

// workWatch is what this process knows of the jobs' work: its own
// workers' batches, and, while it leads, the batches every worker of the
// cluster reports. A Prometheus signal's job-free baseline reads it
// (signals.Config.Work). It has a lock of its own, never held while
// waiting on anything, as the sampler's goroutines call it while the
// engine may hold its own.
type workWatch struct {
	mu  sync.Mutex
	own map[*limit.Limiter]bool
	// reported is when, in Unix nanoseconds, the leader last saw a
	// worker's batch count grow.
	reported atomic.Int64
}

func (w *workWatch) add(l *limit.Limiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.own == nil {
		w.own = map[*limit.Limiter]bool{}
	}
	w.own[l] = true
}

func (w *workWatch) remove(l *limit.Limiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.own, l)
}

func (w *workWatch) report(t time.Time) {
	for {
		old := w.reported.Load()
		if t.UnixNano() <= old || w.reported.CompareAndSwap(old, t.UnixNano()) {
			return
		}
	}
}

// at is when a job was last known at work, as of t: t while a batch of
// this process's holds a slot; the zero time if none ever was.
func (w *workWatch) at(t time.Time) time.Time {
	var last time.Time
	if ns := w.reported.Load(); ns != 0 {
		last = time.Unix(0, ns)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for l := range w.own {
		if x := l.WorkedAt(t); x.After(last) {
			last = x
		}
	}
	return last
}

// WorkedAt returns when a job was last known at work, as of t: t while a
// batch of this process's workers is in flight, else the end of the last
// one, or, while this process leads, the last heartbeat in which any
// worker's batches grew, whichever is later; the zero time if none. Safe
// for concurrent use; it never waits on the database.
func (e *Engine) WorkedAt(t time.Time) time.Time { return e.work.at(t) }
