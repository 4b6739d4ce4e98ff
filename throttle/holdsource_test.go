package throttle

import (
	"testing"
	"time"

	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// The controller holds a job that its windows hold (see
// hold.TestWindowsAreHolds), with the window's hold as the reason.
func TestWindowsHoldThroughTheController(t *testing.T) {
	run, err := hold.ParseWindow("01:00-06:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	vacuum, err := hold.ParseWindow("mon 02:00-03:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	ws := hold.Windows{"purge": {Run: []hold.Window{run}, Avoid: map[string]hold.Window{"weekly-vacuum": vacuum}}}
	mon := func(hh, mm int) time.Time { return time.Date(2026, 12, 7, hh, mm, 0, 0, time.UTC) }
	c, err := New(Config{Holds: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(JobConfig{Name: "purge"}); err != nil {
		t.Fatal(err)
	}
	d := c.Step(mon(0, 30), snap(mon(0, 30), world{load: 0.1, used: 0.1}))
	if jd := d.Jobs["purge"]; jd.Code != status.CodeHeld || len(jd.Holds) != 1 || jd.Holds[0].Source != hold.SourceWindow {
		t.Errorf("controller at 00:30: %+v; want held by the window", jd)
	}
}
