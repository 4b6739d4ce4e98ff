package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// A coordinated worker's heartbeat writes where its job's time went in its
// process, so `throttled status` read from the database says it too: the
// seconds in the row grow and match the process's own count.
func TestWorkerHeartbeatWritesLimitedSeconds(t *testing.T) {
	c := pgtest.Cluster(t)
	tc, _ := runningJob(t, coordinated(t, c, 10), "limited_rows")
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleMonitor)
	var first float64
	pgtest.Eventually(t, 20*time.Second, func() error {
		_, _, ws, err := store.New(conn).Status(context.Background(), 10*time.Second)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if w.Job != "limited_rows" {
				continue
			}
			total := 0.0
			for _, s := range w.LimitedSeconds {
				total += s
			}
			switch {
			case total <= 0:
				return fmt.Errorf("worker %s: limited_seconds %v", w.ID, w.LimitedSeconds)
			case first == 0:
				first = total
				return errors.New("seen once; waiting for the next heartbeat")
			case total <= first:
				return fmt.Errorf("limited_seconds did not grow: %v then %v", first, total)
			}
			own := 0.0
			for _, s := range tc.LimitedSeconds("limited_rows") {
				own += s
			}
			if total > own+0.001 {
				return fmt.Errorf("the row says %.3f s, more than the process counted (%.3f s)", total, own)
			}
			return nil
		}
		return errors.New("no worker row for limited_rows yet")
	})
}
