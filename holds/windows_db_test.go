package holds_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/throttle/hold"
)

// Windows written to the cluster reach every watcher, which applies them
// as holds of source window by its own clock: a job outside its run window
// is held in a process that never saw the file, and one started after the
// write. The change is audited once; writing the same windows again writes
// nothing; removing them releases the job.
func TestWindowsInTheClusterHoldJobsInEveryProcess(t *testing.T) {
	_, pool, db := setup(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "DELETE FROM throttled.windows"); err != nil {
		t.Fatal(err)
	}
	first := holds.NewWatcher(pool, holds.WatcherConfig{Poll: 100 * time.Millisecond})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go first.Run(wctx)

	// A run window that is never open now: it starts in an hour (UTC).
	now := time.Now().UTC()
	start := now.Add(time.Hour)
	spec := fmt.Sprintf("%02d:%02d-%02d:%02d UTC", start.Hour(), start.Minute(), start.Add(time.Minute).Hour(), start.Add(time.Minute).Minute())
	w, err := hold.ParseWindow(spec)
	if err != nil {
		t.Fatal(err)
	}
	maint, _ := hold.ParseWindow("00:00-24:00 UTC")
	ws := hold.Windows{"purge": {Run: []hold.Window{w}}, "archive": {Avoid: map[string]hold.Window{"always": maint}}}
	var dbNow time.Time
	pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow)
	if err := db.Windows().Set(ctx, ws, "test", hold.SourceAuto, "from the test"); err != nil {
		t.Fatal(err)
	}
	if err := db.Windows().Set(ctx, ws, "test", hold.SourceAuto, "again"); err != nil {
		t.Fatal(err)
	}
	if got := events(t, db, dbNow); !slices.Equal(got, []string{"windows:"}) {
		t.Errorf("audit after writing the windows twice: %v; want one windows entry", got)
	}
	held := func(wt *holds.Watcher, j, id string) error {
		for _, h := range wt.Applying(time.Now(), j) {
			if h.ID == id && h.Source == hold.SourceWindow {
				return nil
			}
		}
		return fmt.Errorf("%s: holds %v; want %s", j, wt.Applying(time.Now(), j), id)
	}
	pgtest.Eventually(t, 5*time.Second, func() error { return held(first, "purge", "window:purge") })
	if err := held(first, "archive", "maintenance:always"); err != nil {
		t.Error(err)
	}
	if hs := first.Applying(time.Now(), "other"); len(hs) != 0 {
		t.Errorf("a job without windows is held: %v", hs)
	}
	if !slices.ContainsFunc(first.Active(), func(h hold.Hold) bool { return h.ID == "window:purge" }) {
		t.Errorf("Active() = %v; want the window's hold listed, for the metrics and the API", first.Active())
	}

	// A process started after the write.
	later := holds.NewWatcher(pool, holds.WatcherConfig{})
	if err := later.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held(later, "purge", "window:purge"); err != nil {
		t.Errorf("a watcher started later: %v", err)
	}
	if h := later.Applying(time.Now(), "purge"); len(h) == 1 && !strings.Contains(h[0].Reason, "outside its run window ("+spec+")") {
		t.Errorf("reason %q", h[0].Reason)
	}

	if err := db.Windows().Set(ctx, nil, "test", hold.SourceAuto, "windows removed"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 5*time.Second, func() error {
		if hs := first.Applying(time.Now(), "purge"); len(hs) != 0 {
			return fmt.Errorf("still held after the windows were removed: %v", hs)
		}
		return nil
	})
}

// A row this version cannot read fails the watcher closed.
func TestAnUnreadableWindowFailsClosed(t *testing.T) {
	_, pool, _ := setup(t)
	ctx := context.Background()
	t.Cleanup(func() { pool.Exec(ctx, "DELETE FROM throttled.windows") })
	if _, err := pool.Exec(ctx, "INSERT INTO throttled.windows (job, kind, spec) VALUES ('purge', 'run', 'whenever')"); err != nil {
		t.Fatal(err)
	}
	wt := holds.NewWatcher(pool, holds.WatcherConfig{})
	if err := wt.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "whenever") {
		t.Errorf("Refresh: %v; want the bad row named", err)
	}
	if hs := wt.Applying(time.Now(), "anything"); len(hs) != 1 || hs[0].ID != holds.UnconfirmedHoldID {
		t.Errorf("Applying: %v; want every job held, unconfirmed", hs)
	}
}
