// Package wait is the one bounded sleep of throttled's retry loops: it
// waits d, or until ctx ends, whichever comes first.
package wait

import (
	"context"
	"time"
)

// For waits d and returns nil, or returns ctx.Err() as soon as ctx ends.
// A d of 0 or less waits nothing and reports ctx's state.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
