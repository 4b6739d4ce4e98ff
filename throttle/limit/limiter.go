package limit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// ReasonNoAllocation is the reason a [Limiter]'s gate is closed when its
// [Allocation] grants no work (Rate or MaxInFlight 0) and it is not paused.
const ReasonNoAllocation = "no allocation"

// reasonPaused stands in for an empty pause reason.
const reasonPaused = "paused"

// Limiter paces one job's batches: before a batch starts, the job takes a
// token from a token bucket (Allocation.Rate per second, Allocation.Burst
// deep) and an in-flight slot (at most Allocation.MaxInFlight batches run
// at once), and both only while the Limiter's [Gate] is open. The gate is
// closed while the Limiter is paused or its allocation grants no work; it
// is checked before and after every token wait, so a pause stops waiters
// that were already sleeping for a token.
//
// Use [Limiter.Wait] in a batch loop: it blocks until the batch may start
// and returns a [Grant] to release when the batch ends. Use
// [Limiter.Allow] to skip work rather than wait. The controller calls
// [Limiter.Apply] on every tick and [Limiter.Pause] and [Limiter.Resume]
// when holds come and go.
//
// A new Limiter fails closed: it lets no work start until Apply grants a
// positive allocation. Its bucket starts empty, so the first token comes
// 1/Rate after that. While the gate is closed the bucket keeps filling at
// the last positive rate, up to Burst: after a pause, up to Burst batches
// may start back to back (bounded by MaxInFlight); to ramp up slowly,
// Apply a small Burst before Resume.
//
// Tokens are handed out one waiter at a time, and a waiter sleeping for its
// token wakes when Apply, Pause or Resume changes anything: it gives the
// reservation back and takes a new one at the new rate (or stops at the
// closed gate). So raising the rate takes effect at once, even for a
// waiter that reserved at a tiny rate, and a rate of 0 never strands a
// waiter (the bucket's rate is never set to 0; the gate closes instead).
//
// The zero value is not usable; create a Limiter with [New]. A
// Limiter is safe for concurrent use.
type Limiter struct {
	job    string
	now    func() time.Time
	bucket *rate.Limiter
	gate   Gate
	// turn, of capacity 1, is held by the one waiter allowed to hold a
	// reservation. With a single reservation outstanding, cancelling it
	// restores the bucket exactly; with many, rate.Limiter restores only
	// the latest, and waiters that re-reserve on every change would leak
	// tokens into debt and starve the job.
	turn chan struct{}

	mu       sync.Mutex
	alloc    Allocation // normalized
	paused   bool
	reason   string // pause reason
	inFlight int    // batches between a grant and its release
	// workedAt is when the job was last known at work with no slot
	// held: a slot freed (a batch's end) or a token taken without one (a
	// check's chunk begins), for [Limiter.WorkedAt].
	workedAt time.Time
	changed  chan struct{} // closed and replaced by Apply, Pause and Resume
	// freed is made by a waiter that waits for a slot, and closed and
	// cleared when a slot frees; nil while nobody waits for one, so a
	// release allocates nothing.
	freed chan struct{}
	// queued counts waiters taking a token the slow way (for their turn
	// or asleep on a reservation); Wait's fast path does not pass them.
	queued int
	// waiting counts callers in Wait's slow path (at the gate, for a
	// slot or for a token); waited records that one entered it since the
	// last [Limiter.Waited].
	waiting int
	waited  bool
	// claims are released grants' claims, for reuse.
	claims []*slotClaim
}

// Grant is one batch's permission from [Limiter.Wait] or [Limiter.Allow]:
// an in-flight slot held until [Grant.Release]. It is a small value, so
// handing one out allocates nothing. The zero Grant holds nothing.
type Grant struct {
	claim *slotClaim
	gen   uint64
}

// Release frees the grant's in-flight slot: call it when the batch ends.
// It is safe to call more than once, and on a copy: only the first call
// frees the slot. On the zero Grant it does nothing.
func (g Grant) Release() {
	if g.claim != nil {
		g.claim.release(g.gen)
	}
}

// Done returns the function a batch calls when it ends, as the jobs
// package's pacers hand it out: the first call releases g and then calls
// report with the batch's outcome; later calls do nothing.
func (g Grant) Done(report func(rows int64, took time.Duration, err error)) func(rows int64, took time.Duration, err error) {
	var once sync.Once
	return func(rows int64, took time.Duration, err error) {
		once.Do(func() {
			g.Release()
			report(rows, took, err)
		})
	}
}

// slotClaim is one batch's claim on an in-flight slot, reused once released.
// gen tells its releases apart: a Grant carries the gen it was handed out
// with, and only the first call with the current gen frees the
// slot, so a release called twice, or after the claim was reused, does
// nothing.
type slotClaim struct {
	l   *Limiter
	gen atomic.Uint64
}

// New returns a Limiter for job with Allocation{}: no work until
// [Limiter.Apply] grants some. now is the clock; nil means time.Now. Wait
// sets timers on the runtime clock, so now must agree with it (a fake now
// is for the explicit-time methods, AllowAt and ApplyAt; test waits in a
// testing/synctest bubble instead). job names the job in errors and
// status; it is not validated here.
func New(job string, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	l := &Limiter{
		job: job,
		now: now,
		// A zero limit is safe here: nothing reserves while the gate is
		// closed, and Apply sets a positive limit before opening it.
		bucket:  rate.NewLimiter(0, 0),
		turn:    make(chan struct{}, 1),
		changed: make(chan struct{}),
	}
	l.gate.Close(ReasonNoAllocation)
	return l
}

// Job returns the name of the job this Limiter paces.
func (l *Limiter) Job() string { return l.job }

// Apply is shorthand for ApplyAt(now(), a).
func (l *Limiter) Apply(a Allocation) { l.ApplyAt(l.now(), a) }

// ApplyAt sets the job's allocation as of time t: the bucket's rate and
// depth change at t (tokens earned before t at the old rate are kept), and
// a raised MaxInFlight admits waiters at once. An allocation that grants
// no work (Rate or MaxInFlight 0) closes the gate with
// [ReasonNoAllocation]; a positive one opens it unless the Limiter is
// paused. Applying the allocation already in effect does nothing, so the
// controller may call it on every tick.
func (l *Limiter) ApplyAt(t time.Time, a Allocation) {
	a = a.normalized()
	l.mu.Lock()
	defer l.mu.Unlock()
	if a == l.alloc {
		return
	}
	if a.runs() {
		// Never SetLimit(0): a rate.Limiter waiter at limit 0 never wakes.
		l.bucket.SetLimitAt(t, a.limit())
		l.bucket.SetBurstAt(t, a.Burst)
	}
	l.alloc = a
	l.changedLocked()
}

// Allocation returns the allocation in effect, with out-of-range fields
// clamped as described on [Allocation].
func (l *Limiter) Allocation() Allocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.alloc
}

// Pause closes the gate with reason (empty means "paused"): waiters block,
// including those sleeping for a token, and Allow refuses. Batches already
// running are not interrupted. Pausing a paused Limiter replaces the
// reason.
func (l *Limiter) Pause(reason string) {
	if reason == "" {
		reason = reasonPaused
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused, l.reason = true, reason
	l.changedLocked()
}

// Resume lifts the pause. The gate opens if the allocation grants work;
// else it stays closed with [ReasonNoAllocation].
func (l *Limiter) Resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.paused {
		return
	}
	l.paused, l.reason = false, ""
	l.changedLocked()
}

// State reports whether the gate is open and, if not, why: the pause
// reason, or [ReasonNoAllocation].
func (l *Limiter) State() (open bool, reason string) { return l.gate.State() }

// InFlight returns how many batches hold a slot: granted by Wait or Allow
// and not yet released.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}

// WorkedAt returns when a batch of the job was last at work, as of t: t
// while one holds a slot, else when the last one released it or the last
// token was taken without one ([Limiter.TakeAt]: work the Limiter never
// sees end), and the zero time if none ever ran.
func (l *Limiter) WorkedAt(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight > 0 {
		return t
	}
	return l.workedAt
}

// Allow is shorthand for AllowAt(now()).
func (l *Limiter) Allow() (Grant, bool) { return l.AllowAt(l.now()) }

// AllowAt reports whether a batch may start at time t without waiting: the
// gate is open, a token is available at t and a slot is free. If so it
// takes both and returns the [Grant] to release when the batch ends (as
// for [Limiter.Wait]); if not it takes nothing. A token reserved by a
// sleeping Wait is not available to AllowAt, so Allow never jumps the
// queue.
func (l *Limiter) AllowAt(t time.Time) (Grant, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.openLocked() || l.inFlight >= l.alloc.MaxInFlight || !l.bucket.AllowN(t, 1) {
		l.waited = true // refused: demand the limiter did not meet
		return Grant{}, false
	}
	l.inFlight++
	return l.grantLocked(), true
}

// Take is shorthand for TakeAt(now()).
func (l *Limiter) Take() bool { return l.TakeAt(l.now()) }

// TakeAt reports whether a token is available at time t with the gate
// open, and takes it if so, with no in-flight slot: for work the Limiter
// never sees end, such as the chunk a freno client copies after its check.
// Like AllowAt it takes nothing otherwise, a refusal counts as a wait (see
// [Limiter.Waited]), and it never takes a token reserved by a sleeping
// Wait.
func (l *Limiter) TakeAt(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.openLocked() || !l.bucket.AllowN(t, 1) {
		l.waited = true // refused: demand the limiter did not meet
		return false
	}
	l.workedAt = t
	return true
}

// Wait blocks until a batch may start: the gate is open, a token is
// available and fewer than MaxInFlight batches run. It takes the slot
// first and the token last, so tokens are not spent by waiters that then
// queue for a slot, and batch starts never exceed the rate. It returns the
// [Grant] to release when the batch ends; Grant.Release frees the slot and
// is safe to call more than once.
//
// A waiter sleeping for its token wakes when the allocation changes or the
// Limiter is paused, gives its reservation back and starts over: at the
// new rate, or blocked at the closed gate until Resume. The gate is checked
// once more after the token wait, so a pause that lands as the token falls
// due also stops the batch. Either way the paused waiter spends no token
// and holds no slot.
//
// Wait never outlives ctx: when ctx is done (or already is) it returns a
// error that wraps ctx.Err() and says what the waiter
// was waiting for (the gate and its reason, a slot, or a token), with the
// zero Grant. It does
// not fail early when the token is due after ctx's deadline, because the
// rate may be raised before then.
func (l *Limiter) Wait(ctx context.Context) (Grant, error) {
	if ctx.Err() == nil {
		// The fast path: with the gate open, a slot free, a token in the
		// bucket now and nobody queued for one, take both under one lock
		// (the gate's state changes only under it), with no reservation,
		// timer or channel. Else wait the slow way.
		now := l.now()
		l.mu.Lock()
		if l.queued == 0 && l.openLocked() && l.inFlight < l.alloc.MaxInFlight && l.bucket.AllowN(now, 1) {
			l.inFlight++
			g := l.grantLocked()
			l.mu.Unlock()
			return g, nil
		}
		l.mu.Unlock()
	}
	return l.wait(ctx)
}

// Waited reports whether a caller of Wait waited (at the closed gate, for
// an in-flight slot or for a token) since the last call, or waits now:
// the job wants more than the limiter gives it. Each call starts a new
// interval, so one reader (the controller's step, a worker's heartbeat)
// should call it. A refused [Limiter.Allow] counts as a wait. A caller that finds a token and a slot at once is no
// demand: a job whose own batches are slower than its rate never waits.
func (l *Limiter) Waited() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.waited || l.waiting > 0
	l.waited = false
	return w
}

// wait is Wait's slow path.
func (l *Limiter) wait(ctx context.Context) (Grant, error) {
	l.mu.Lock()
	l.waiting++
	l.waited = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.waiting--
		l.mu.Unlock()
	}()
	for {
		// Gate.Wait also refuses a done ctx, even at an open gate.
		if err := l.gate.Wait(ctx); err != nil {
			return Grant{}, l.waitErr("", err) // err names the gate's reason
		}
		ok, err := l.takeSlot(ctx)
		if err != nil {
			return Grant{}, err
		}
		if !ok {
			continue // the gate closed again
		}
		ok, err = l.takeToken(ctx)
		if ok {
			l.mu.Lock()
			g := l.grantLocked()
			l.mu.Unlock()
			return g, nil
		}
		l.mu.Lock()
		l.freeSlotLocked()
		l.mu.Unlock()
		if err != nil {
			return Grant{}, err
		}
	}
}

// takeSlot takes an in-flight slot, waiting for one to free. It reports
// false, having taken nothing, if the gate is closed.
func (l *Limiter) takeSlot(ctx context.Context) (bool, error) {
	for {
		l.mu.Lock()
		if !l.openLocked() {
			l.mu.Unlock()
			return false, nil
		}
		if l.inFlight < l.alloc.MaxInFlight {
			l.inFlight++
			l.mu.Unlock()
			return true, nil
		}
		running, limit := l.inFlight, l.alloc.MaxInFlight
		if l.freed == nil {
			l.freed = make(chan struct{})
		}
		changed, freed := l.changed, l.freed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-freed:
		case <-ctx.Done():
			return false, l.waitErr(fmt.Sprintf("an in-flight slot (%d of %d running)", running, limit), ctx.Err())
		}
	}
}

// takeToken takes a token, waiting for its turn and then for the bucket.
// It reports false, having given the token back, if the gate is closed
// before or after the wait.
func (l *Limiter) takeToken(ctx context.Context) (bool, error) {
	l.mu.Lock()
	l.queued++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.queued--
		l.mu.Unlock()
	}()
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return false, l.waitErr("a token (queued behind another waiter)", ctx.Err())
	}
	defer func() { <-l.turn }()

	for {
		l.mu.Lock()
		if !l.openLocked() {
			l.mu.Unlock()
			return false, nil
		}
		now := l.now()
		r := l.bucket.ReserveN(now, 1)
		changed, limit := l.changed, l.alloc.Rate
		l.mu.Unlock()
		// ApplyAt keeps Burst >= 1 while the gate is open, so r is OK and
		// its delay finite.
		due := now.Add(r.DelayFrom(now))

		if wait := due.Sub(now); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-changed:
				timer.Stop()
				if now := l.now(); now.Before(due) {
					r.CancelAt(now)
					continue // re-check the gate, re-reserve at the new rate
				}
				// The token fell due as the change came: keep it, and
				// let the gate check below decide.
			case <-ctx.Done():
				timer.Stop()
				r.CancelAt(earliest(l.now(), due))
				return false, l.waitErr(fmt.Sprintf("a token at %g/s", limit), ctx.Err())
			}
		}

		l.mu.Lock()
		open := l.openLocked()
		if !open {
			// CancelAt restores nothing once the reservation is due, so
			// give it back as of its due time; as the only reservation
			// outstanding, it is restored in full.
			r.CancelAt(earliest(l.now(), due))
		}
		l.mu.Unlock()
		return open, nil
	}
}

// openLocked reports whether work may start now. l.mu must be held.
func (l *Limiter) openLocked() bool { return !l.paused && l.alloc.runs() }

// changedLocked brings the gate in line with the pause and the allocation
// and wakes every waiter to re-check. l.mu must be held.
func (l *Limiter) changedLocked() {
	switch {
	case l.paused:
		l.gate.Close(l.reason)
	case !l.alloc.runs():
		l.gate.Close(ReasonNoAllocation)
	default:
		l.gate.Open()
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// grantLocked returns the Grant of a slot just taken. Its claim is reused
// once released, so a grant allocates nothing in the steady state.
// l.mu must be held.
func (l *Limiter) grantLocked() Grant {
	var g *slotClaim
	if n := len(l.claims); n > 0 {
		g = l.claims[n-1]
		l.claims = l.claims[:n-1]
	} else {
		g = &slotClaim{l: l}
	}
	return Grant{claim: g, gen: g.gen.Load()}
}

// release frees g's slot if gen is still g's generation: once per grant.
func (g *slotClaim) release(gen uint64) {
	if !g.gen.CompareAndSwap(gen, gen+1) {
		return
	}
	l := g.l
	l.mu.Lock()
	l.freeSlotLocked()
	l.claims = append(l.claims, g)
	l.mu.Unlock()
}

// freeSlotLocked frees one in-flight slot and wakes the waiters for one.
// l.mu must be held.
func (l *Limiter) freeSlotLocked() {
	l.inFlight--
	l.workedAt = l.now()
	if l.freed != nil {
		close(l.freed)
		l.freed = nil
	}
}

// waitErr wraps err, which wraps a context error, with the job and what
// the waiter was waiting for, if anything.
func (l *Limiter) waitErr(what string, err error) error {
	if what == "" {
		return fmt.Errorf("job %q: wait: %w", l.job, err)
	}
	return fmt.Errorf("job %q: wait for %s: %w", l.job, what, err)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
