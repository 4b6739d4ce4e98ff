package throttle

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// A ratio hold scales its job to that share of the rate it would get,
// with its own code and the hold in its reason; the other job keeps its
// share; a pausing hold beside it still pauses.
func TestARatioHoldScalesItsJob(t *testing.T) {
	holds, err := hold.NewLocal(hold.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{MaxBudget: 20, InitialBudget: 20, Holds: holds})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []status.Job{"purge", "archive"} {
		if err := c.Register(JobConfig{Name: j}); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Step(at(1), snap(at(1), world{load: 0.1, used: 0.1}))
	h, err := holds.AddAt(at(1), hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceCLI, Reason: "slow it for the migration", Actor: "alice", TTL: time.Hour, Ratio: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Step(at(2), snap(at(2), world{load: 0.1, used: 0.1}))
	p, a := d.Jobs["purge"], d.Jobs["archive"]
	if math.Abs(p.Rate-0.3*a.Rate) > 1e-9 || p.Code != status.CodeScaled || p.State != status.JobThrottled || len(p.Holds) != 1 || p.Holds[0].ID != h.ID {
		t.Errorf("purge under a 0.3 hold: %+v; want 0.3 of archive's %v, code scaled, the hold listed", p, a.Rate)
	}
	if !strings.Contains(p.Reason, "scaled to 30% by hold "+h.ID) {
		t.Errorf("reason %q", p.Reason)
	}
	if a.Rate < before.Jobs["archive"].Rate {
		t.Errorf("archive went from %v to %v under purge's ratio hold", before.Jobs["archive"].Rate, a.Rate)
	}
	if _, err := holds.AddAt(at(2), hold.Request{Scope: hold.AllJobs(), Source: hold.SourceCLI, Reason: "stop", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	d = c.Step(at(3), snap(at(3), world{load: 0.1, used: 0.1}))
	if d.Jobs["purge"].Code != status.CodeHeld || d.Mode != status.ModePaused {
		t.Errorf("a pause beside the ratio: %+v, mode %s; want held", d.Jobs["purge"], d.Mode)
	}
}
