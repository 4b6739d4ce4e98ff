package wait

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestForWaitsOrStopsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := For(t.Context(), 3*time.Second); err != nil || time.Since(start) != 3*time.Second {
			t.Fatalf("For 3s: %v after %s", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		if err := For(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("For 1h under a 1s deadline: %v after %s", err, time.Since(start))
		}
		if err := For(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("For 0 on an ended context: %v", err)
		}
		if err := For(t.Context(), -time.Second); err != nil {
			t.Fatalf("For -1s: %v", err)
		}
	})
}
