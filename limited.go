package throttled

import (
	"slices"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// limited.go: the time each job of this process spends at each why
// (status.Why: at full rate, growing, limited by a signal, slow start,
// held, ...), counted wherever the process applies a decision to its
// jobs: the solo decide loop, each coordinated worker's heartbeat. A
// Prometheus signal that limits a job counts under its own name (the
// controller's External, bounded by the configuration), in a coordinated
// worker whose configuration lacks it too (observe). The
// metrics export it (throttled_jobs_limited_seconds_total), exec sums it
// up, the sidecar's status shows it.

// limitedTicks is the most ticks one interval between two observations
// counts for: a loop that stalled does not swell one why.
const limitedTicks = 3

// observeDecision counts a decision just applied for every job in it.
func (c *Client) observeDecision(now time.Time, d throttle.Decision) {
	for j := range d.Jobs {
		st, _ := d.Status(j)
		c.limited.Observe(now, j, status.WhyOf(st, c.external...))
	}
}

// observe counts a status just applied to one job (a coordinated
// worker's heartbeat). A binding signal the leader names that this
// process's configuration lacks (an exec without the sidecar's file) is
// one of the leader's Prometheus signals: a built-in one is a why of its
// own, and a custom signal gates rather than binds. It counts under its
// own name, a label bounded by the leader's configuration.
func (c *Client) observe(now time.Time, st status.JobStatus) {
	ext := c.external
	if b := st.Binding.Signal; b != "" && !slices.Contains(ext, b) && signals.ValidName(b) {
		ext = append(slices.Clone(ext), b)
	}
	c.limited.Observe(now, st.Job, status.WhyOf(st, ext...))
}

// LimitedSeconds is the seconds job has spent at each why in this process
// since it was registered (nil for a job this process does not pace):
// what the counter throttled_jobs_limited_seconds_total exports.
func (c *Client) LimitedSeconds(job string) map[status.Why]float64 {
	return c.limited.Seconds(time.Now(), status.Job(job))
}

// WhySlow sums up LimitedSeconds in a line, such as "ran 4m10s: 12 % at
// full rate, 81 % limited by foreground_latency, 7 % slow start".
func (c *Client) WhySlow(job string) string {
	return status.WhySlow(c.LimitedSeconds(job))
}
