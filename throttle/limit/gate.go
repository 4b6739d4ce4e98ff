package limit

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrClosed marks a wait that ended (its context done) while the gate was
// closed. Such errors also wrap the context's error and carry the close
// reason in their text.
var ErrClosed = errors.New("limit: gate closed")

// Gate is a pause gate: while it is closed, [Gate.Wait] blocks; when it
// opens, every waiter wakes at once. A closed gate carries a reason, for
// errors and status.
//
// The zero value is an open gate. A Gate must not be copied after first
// use. It is safe for concurrent use.
type Gate struct {
	mu     sync.Mutex
	closed bool
	reason string
	// opened is non-nil while the gate is closed; Open closes it to wake
	// every waiter without knowing who they are.
	opened chan struct{}
}

// Close closes the gate with a reason such as "paused by alice: deploy".
// Closing a closed gate only replaces the reason.
func (g *Gate) Close(reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.opened = make(chan struct{})
	}
	g.reason = reason
}

// Open opens the gate and wakes every waiter. Opening an open gate does
// nothing.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		close(g.opened)
		g.closed, g.reason, g.opened = false, "", nil
	}
}

// State reports whether the gate is open and, if not, why.
func (g *Gate) State() (open bool, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.closed, g.reason
}

// Wait returns nil once the gate is open: at once if it is open now, else
// as soon as [Gate.Open] is called. A waiter woken by Open that finds the
// gate closed again (Close raced it) keeps waiting: Wait returns nil only
// if the gate was open when the waiter looked.
//
// A canceled caller never goes through: if ctx is done, or becomes done
// before the gate opens, Wait returns an error that wraps ctx.Err() and,
// if the gate is closed, [ErrClosed], naming the close reason.
func (g *Gate) Wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		closed, opened := g.closed, g.opened
		g.mu.Unlock()
		if !closed {
			return ctx.Err()
		}
		select {
		case <-opened:
		case <-ctx.Done():
			// Report the reason as of now: Close may have replaced it
			// while we waited.
			if open, reason := g.State(); !open {
				return fmt.Errorf("%w (%s): %w", ErrClosed, reason, ctx.Err())
			}
			return ctx.Err()
		}
	}
}
