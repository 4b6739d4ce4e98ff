package throttle

import (
	"errors"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
)

// TestPacerReportsTheForegroundStretch follows the foreground_latency
// reading from a snapshot to the pacer the jobs package sizes batches by:
// its worse reading over the target, 1 while unusable (never "fine"), and
// nothing without the rule.
func TestPacerReportsTheForegroundStretch(t *testing.T) {
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
	ls := NewLimiters(nil)
	p := ls.Pacer(c, "purge")
	if _, _, ok := p.ForegroundStretch(); ok {
		t.Fatal("a stretch before any decision")
	}

	for i, tc := range []struct {
		fg, raw float64
		err     error
		want    float64
	}{
		{fg: 1.3, raw: 1.95, want: 1.5},                // the raw reading is the worse
		{fg: 0.65, raw: 0.52, want: 0.5},               // the smoothed one is
		{err: errors.New("canary timed out"), want: 1}, // unreadable: at the target, not below
	} {
		now := at(i + 1)
		ls.Apply(c.Step(now, withFg(now, calm, tc.fg, tc.raw, tc.err)))
		got, gotAt, ok := p.ForegroundStretch()
		if !ok || got < tc.want-1e-9 || got > tc.want+1e-9 || !gotAt.Equal(now) {
			t.Errorf("tick %d: ForegroundStretch = %v at %v, %v; want %v at %v", i+1, got, gotAt, ok, tc.want, now)
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
	ls2 := NewLimiters(nil)
	p2 := ls2.Pacer(plain, "purge")
	ls2.Apply(plain.Step(at(1), withFg(at(1), calm, 2, 2, nil)))
	if v, _, ok := p2.ForegroundStretch(); ok {
		t.Fatalf("without the rule ForegroundStretch = %v, true; want false", v)
	}
}
