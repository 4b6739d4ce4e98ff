package throttled_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// A status surface calls a sample stale by the controller's own judgment:
// its rule's max_age, not the sampler's 3 s, and a sample stamped ahead
// of the clock by more than that is refused, with why.
func TestUnfreshIsTheControllersJudgment(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, NoForegroundLatency: true,
		Controller: throttle.Config{Rules: map[signals.Name]throttle.Rule{signals.ReplicaLagSeconds: {Target: 30, MaxAge: 8 * time.Second}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc2 := range []struct {
		name string
		x    signals.Sample
		want string // "" fresh, else a word of why not
	}{
		{"5.7 s old under its rule's 8 s", signals.Sample{Name: signals.ReplicaLagSeconds, At: now.Add(-5700 * time.Millisecond)}, ""},
		{"9 s old over its rule's 8 s", signals.Sample{Name: signals.ReplicaLagSeconds, At: now.Add(-9 * time.Second)}, "over max_age 8s"},
		{"600 s ahead", signals.Sample{Name: signals.ReplicaLagSeconds, At: now.Add(600 * time.Second)}, "clock skew"},
		{"a default rule's 3 s", signals.Sample{Name: signals.PrimaryLoad, At: now.Add(-4 * time.Second)}, "over max_age 3s"},
		{"no rule: the sampler's 3 s", signals.Sample{Name: signals.WALBytesPerSecond, At: now.Add(-2 * time.Second)}, ""},
	} {
		got := tc.Unfresh(now, tc2.x)
		if tc2.want == "" && got != "" || tc2.want != "" && !strings.Contains(got, tc2.want) {
			t.Errorf("%s: Unfresh %q, want %q", tc2.name, got, tc2.want)
		}
	}
}
