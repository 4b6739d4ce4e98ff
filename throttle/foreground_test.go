package throttle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// TestDecisionCarriesTheForegroundStretch follows the foreground_latency
// reading from a snapshot to the decision the jobs size batches by: its
// worse reading over the target, 1 while unusable (never "fine"), and
// nothing without the rule.
func TestDecisionCarriesTheForegroundStretch(t *testing.T) {
	withFg := func(now time.Time, w world, fg, fgRaw float64, err error) signals.Snapshot {
		s := snap(now, w)
		s.Samples = append(s.Samples, signals.Sample{Name: signals.ForegroundLatency, Value: fg, Raw: fgRaw, At: now, Err: err})
		return s
	}
	calm := world{load: 0.2, used: 0.1}

	c, err := New(Config{Rules: map[signals.Name]Rule{signals.ForegroundLatency: {Target: 1.3}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(JobConfig{Name: "purge"}); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		fg, raw float64
		err     error
		want    float64
	}{
		// The pressure is the excess over the baseline against the 0.3
		// the target allows.
		{fg: 1.3, raw: 1.45, want: 1.5},                // the raw reading is the worse
		{fg: 1.15, raw: 1.06, want: 0.5},               // the smoothed one is
		{fg: 0.9, raw: 0.95, want: 0},                  // under the baseline: no stretch, and still a reading
		{err: errors.New("canary timed out"), want: 1}, // unreadable: at the target, not below
	} {
		now := at(i + 1)
		d := c.Step(now, withFg(now, calm, tc.fg, tc.raw, tc.err))
		if got := d.Foreground; got < tc.want-1e-9 || got > tc.want+1e-9 || !d.ForegroundAt.Equal(now) {
			t.Errorf("tick %d: Foreground = %v at %v; want %v at %v", i+1, got, d.ForegroundAt, tc.want, now)
		}
	}

	// No foreground_latency rule: nothing to size by.
	plain, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Register(JobConfig{Name: "purge"}); err != nil {
		t.Fatal(err)
	}
	if d := plain.Step(at(1), withFg(at(1), calm, 2, 2, nil)); !d.ForegroundAt.IsZero() {
		t.Fatalf("without the rule Foreground = %v at %v; want no time", d.Foreground, d.ForegroundAt)
	}
}

// While the canary learns its baseline the required rule stops work, as
// a stale signal would, but nothing is wrong: the decision says warming
// up, raises no event (nothing to page about), and work starts at the
// budget it would have had, with no slow start after it.
func TestAWarmingUpSignalIsNoStalePause(t *testing.T) {
	c, err := New(Config{InitialBudget: 10, Rules: map[signals.Name]Rule{signals.ForegroundLatency: DefaultForegroundLatencyRule}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(JobConfig{Name: "purge"}); err != nil {
		t.Fatal(err)
	}
	step := func(i int, fg signals.Sample) Decision {
		now := at(i)
		s := snap(now, world{load: 0.2, used: 0.1})
		fg.At = now
		s.Samples = append(s.Samples, fg)
		return c.Step(now, s)
	}
	warming := signals.Sample{Name: signals.ForegroundLatency, Err: fmt.Errorf("%w: waiting for a 1s window", signals.ErrBaselineWarmup)}
	for i := 1; i <= 2; i++ {
		d := step(i, warming)
		if d.Mode != status.ModeThrottled || d.Code != status.CodeWarmingUp || d.Budget != 0 || len(d.Events) != 0 || !strings.HasPrefix(d.Reason, "warming up: foreground_latency") {
			t.Fatalf("tick %d: %s %s budget %v events %v (%s); want throttled, warming_up, 0, no event", i, d.Mode, d.Code, d.Budget, d.Events, d.Reason)
		}
		if jd := d.Jobs["purge"]; jd.State != status.JobPaused || jd.Code != status.CodeWarmingUp || jd.Code.Go() {
			t.Fatalf("tick %d: the job is %s %s; want paused, warming_up, no go", i, jd.State, jd.Code)
		}
	}
	d := step(3, signals.Sample{Name: signals.ForegroundLatency, Value: 1, Raw: 1})
	if d.Mode != status.ModeRunning || d.Budget != 10 || len(d.Events) != 0 {
		t.Fatalf("baseline learnt: %s at %v, events %v (%s); want running at the initial 10, no event", d.Mode, d.Budget, d.Events, d.Reason)
	}
	// A canary that fails, unlike one learning, is stale.
	if d := step(4, signals.Sample{Name: signals.ForegroundLatency, Err: signals.ErrCanary}); d.Mode != status.ModeStale || d.Code != status.CodeStale || len(d.Events) != 1 {
		t.Fatalf("canary failed: %s %s events %v; want stale, with its event", d.Mode, d.Code, d.Events)
	}
}
