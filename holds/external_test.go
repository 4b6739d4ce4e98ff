package holds_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/throttle/hold"
)

// An alert still firing after its hold expired (Grafana repeats a firing
// notification every repeat_interval, 4h by default; a hold lives 1h by
// default) pauses the jobs again: the expired hold, never released, hands
// its key to the new one.
func TestExternalHoldRefiresAfterExpiry(t *testing.T) {
	_, pool, db := setup(t)
	ctx := context.Background()
	key := fmt.Sprintf("grafana:refire-%d", time.Now().UnixNano())
	startsAt := time.Now().Add(-time.Minute)
	req := hold.Request{Scope: hold.AllJobs(), Source: hold.SourceGrafanaAlert, Reason: "replica lag alert", Actor: "grafana", TTL: time.Second}
	h, res, err := db.Holds().AddExternal(ctx, key, startsAt, req)
	if err != nil || res != holds.ExternalAdded {
		t.Fatalf("first firing: %v, %v", res, err)
	}
	// The hold expires while the alert is still firing.
	pgtest.Eventually(t, 10*time.Second, func() error {
		active, err := db.Holds().Active(ctx)
		if err != nil {
			return err
		}
		for _, a := range active {
			if a.ID == h.ID {
				return errors.New("hold still active")
			}
		}
		return nil
	})
	// Expiry is audited by a watcher as usual.
	if err := holds.NewWatcher(pool, holds.WatcherConfig{}).Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// Grafana repeats the still-firing alert: it must pause again.
	req.TTL = time.Hour
	h2, res, err := db.Holds().AddExternal(ctx, key, startsAt, req)
	if err != nil {
		t.Fatalf("repeat of a still-firing alert after its hold expired: %v; want a new hold", err)
	}
	w := holds.NewWatcher(pool, holds.WatcherConfig{})
	if err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.Applying(time.Now(), "purge"); len(got) != 1 || got[0].ID != h2.ID {
		t.Fatalf("after the repeat (%s): applying %v; want hold %s", res, got, h2.ID)
	}
}
