package limit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// waitAsync runs g.Wait(ctx) in a goroutine; the channel gets its error.
func waitAsync(ctx context.Context, g *Gate) <-chan error {
	done := make(chan error, 1)
	go func() { done <- g.Wait(ctx) }()
	return done
}

// returned reports whether done has a result now, and the result.
func returned[T any](done <-chan T) (T, bool) {
	select {
	case v := <-done:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// advance moves a synctest bubble's fake clock on by d once every other
// goroutine in the bubble is blocked.
func advance(d time.Duration) {
	timer := time.NewTimer(d)
	<-timer.C
	synctest.Wait()
}

func TestGateOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		if open, reason := g.State(); !open || reason != "" {
			t.Fatalf("zero Gate State() = %v, %q; want open", open, reason)
		}
		start := time.Now()
		if err := g.Wait(t.Context()); err != nil {
			t.Fatalf("Wait on an open gate: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Wait on an open gate took %s", d)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := g.Wait(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
			t.Errorf("Wait on an open gate with a canceled ctx = %v; want context.Canceled alone", err)
		}
		g.Close("deploy")
		if err := g.Wait(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrClosed) {
			t.Errorf("Wait on a closed gate with a canceled ctx = %v; want context.Canceled and ErrClosed", err)
		}
	})
}

func TestGateClosedBlocksUntilOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		g.Close("deploy")
		if open, reason := g.State(); open || reason != "deploy" {
			t.Fatalf("State() = %v, %q; want closed, deploy", open, reason)
		}
		start := time.Now()
		done := waitAsync(t.Context(), &g)
		advance(time.Hour)
		if err, ok := returned(done); ok {
			t.Fatalf("Wait returned %v while the gate was closed", err)
		}
		g.Close("deploy, part 2") // still closed: only the reason changes
		synctest.Wait()
		if _, ok := returned(done); ok {
			t.Fatal("Wait returned when Close replaced the reason")
		}
		if _, reason := g.State(); reason != "deploy, part 2" {
			t.Errorf("reason %q after a second Close", reason)
		}
		g.Open()
		synctest.Wait()
		err, ok := returned(done)
		if !ok || err != nil {
			t.Fatalf("Wait after Open: returned %v, err %v; want nil", ok, err)
		}
		if d := time.Since(start); d != time.Hour {
			t.Errorf("Wait returned after %s; want the moment Open was called (1h)", d)
		}
		if open, reason := g.State(); !open || reason != "" {
			t.Errorf("State() after Open = %v, %q", open, reason)
		}
	})
}

func TestGateReclosedBeforeWaiterRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		g.Close("a")
		done := waitAsync(t.Context(), &g)
		synctest.Wait()
		// The waiter cannot run between these two calls.
		g.Open()
		g.Close("b")
		synctest.Wait()
		if err, ok := returned(done); ok {
			t.Fatalf("Wait returned %v though the gate closed again before the waiter looked", err)
		}
		g.Open()
		synctest.Wait()
		if err, ok := returned(done); !ok || err != nil {
			t.Fatalf("Wait after the second Open: returned %v, err %v", ok, err)
		}
	})
}

func TestGateDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		g.Close("primary load critical")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := g.Wait(ctx)
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("Wait returned after %s; want exactly the 5s deadline", d)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrClosed) {
			t.Errorf("Wait = %v; want errors.Is DeadlineExceeded and ErrClosed", err)
		}
		if err == nil || !strings.Contains(err.Error(), "primary load critical") {
			t.Errorf("error %v does not name the close reason", err)
		}
	})
}

func TestGateCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		g.Close("deploy")
		ctx, cancel := context.WithCancel(t.Context())
		done := waitAsync(ctx, &g)
		advance(time.Minute)
		cancel()
		synctest.Wait()
		err, ok := returned(done)
		if !ok || !errors.Is(err, context.Canceled) || !errors.Is(err, ErrClosed) {
			t.Fatalf("after cancel: returned %v, err %v; want context.Canceled and ErrClosed", ok, err)
		}
		if open, _ := g.State(); open {
			t.Error("a canceled waiter opened the gate")
		}
	})
}

func TestGateManyWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		g.Close("deploy")
		const n = 100
		done := make(chan error, n)
		for range n {
			go func() { done <- g.Wait(t.Context()) }()
		}
		advance(time.Minute)
		if len(done) != 0 {
			t.Fatalf("%d waiters returned while the gate was closed", len(done))
		}
		g.Open()
		synctest.Wait()
		if len(done) != n {
			t.Fatalf("%d of %d waiters woke on Open", len(done), n)
		}
		for range n {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
}
