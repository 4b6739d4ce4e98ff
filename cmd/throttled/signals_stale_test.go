package main

import (
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
)

// `throttled signals --config` calls a sample stale as the controller
// does: by its rule's max_age where the file gives one, else by
// --max-age, and a sample stamped ahead of the clock by more is stale too.
func TestSignalsStaleByTheRulesMaxAge(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	snap := signals.Snapshot{At: now, MaxAge: 3 * time.Second}
	customs := map[signals.Name]customInfo{"api_p99": {source: "throttled.hcl:9", maxAge: 8 * time.Second}}
	for _, tc := range []struct {
		name string
		x    signals.Sample
		want bool
	}{
		{"5.7 s old under its rule's 8 s", signals.Sample{Name: "api_p99", At: now.Add(-5700 * time.Millisecond)}, false},
		{"9 s old over its rule's 8 s", signals.Sample{Name: "api_p99", At: now.Add(-9 * time.Second)}, true},
		{"600 s ahead", signals.Sample{Name: "api_p99", At: now.Add(600 * time.Second)}, true},
		{"no rule in the file: --max-age", signals.Sample{Name: signals.PrimaryLoad, At: now.Add(-4 * time.Second)}, true},
		{"within --max-age", signals.Sample{Name: signals.PrimaryLoad, At: now.Add(-2 * time.Second)}, false},
	} {
		if got := stale(snap, customs, tc.x); got != tc.want {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.want)
		}
		if got := toJSON(signals.Snapshot{At: now, MaxAge: snap.MaxAge, Samples: []signals.Sample{tc.x}}, customs).Signals[0].Stale; got != tc.want {
			t.Errorf("%s: --json stale %v, want %v", tc.name, got, tc.want)
		}
	}
}
