package throttle

import (
	"math"
	"strings"
	"testing"
	"time"
)

// A ratio hold scales its job to that share of the rate it would get,
// with its own code and the hold in its reason; the other job keeps its
// share; a pausing hold beside it still pauses.
func TestARatioHoldScalesItsJob(t *testing.T) {
	holds, err := NewLocalHolds(LocalHoldsConfig{now: func() time.Time { return at(0) }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{MaxBudget: 20, InitialBudget: 20, Holds: holds})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []Job{"purge", "archive"} {
		if err := c.Register(JobConfig{Name: j}); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Step(at(1), snap(at(1), world{load: 0.1, used: 0.1}))
	h, err := holds.AddAt(at(1), HoldRequest{Scope: OneJob("purge"), Source: SourceCLI, Reason: "slow it for the migration", Actor: "alice", TTL: time.Hour, Ratio: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Step(at(2), snap(at(2), world{load: 0.1, used: 0.1}))
	p, a := d.Jobs["purge"], d.Jobs["archive"]
	if math.Abs(p.Rate-0.3*a.Rate) > 1e-9 || p.Code != CodeScaled || p.State != JobThrottled || len(p.Holds) != 1 || p.Holds[0].ID != h.ID {
		t.Errorf("purge under a 0.3 hold: %+v; want 0.3 of archive's %v, code scaled, the hold listed", p, a.Rate)
	}
	if !strings.Contains(p.Reason, "scaled to 30% by hold "+h.ID) {
		t.Errorf("reason %q", p.Reason)
	}
	if a.Rate < before.Jobs["archive"].Rate {
		t.Errorf("archive went from %v to %v under purge's ratio hold", before.Jobs["archive"].Rate, a.Rate)
	}
	if _, err := holds.AddAt(at(2), HoldRequest{Scope: AllJobs(), Source: SourceCLI, Reason: "stop", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	d = c.Step(at(3), snap(at(3), world{load: 0.1, used: 0.1}))
	if d.Jobs["purge"].Code != CodeHeld || d.Mode != ModePaused {
		t.Errorf("a pause beside the ratio: %+v, mode %s; want held", d.Jobs["purge"], d.Mode)
	}
}

func TestRatioIsChecked(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := (HoldRequest{Scope: AllJobs(), Source: SourceCLI, Reason: "x", Ratio: r}).Check(TTLPolicy{Default: time.Hour}); err == nil || !strings.Contains(err.Error(), "ratio") {
			t.Errorf("ratio %v: %v; want refused", r, err)
		}
	}
	hs := []Hold{{ID: "a", Ratio: 0.5}, {ID: "b", Ratio: 0.2}, {ID: "c"}}
	if s, by := Scale(hs); s != 0.2 || by.ID != "b" {
		t.Errorf("Scale = %v by %v; want 0.2 by b", s, by)
	}
	if p := Pausing(hs); len(p) != 1 || p[0].ID != "c" {
		t.Errorf("Pausing = %v; want only c", p)
	}
}
