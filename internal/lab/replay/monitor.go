package replay

import (
	"context"
	"sync"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
)

// point is one value at a time, in seconds since the run's start.
type point struct{ t, v float64 }

// series is one run over time, for its plot.
type series struct {
	load, raw  []point // primary_load, smoothed and raw
	lag        []point // the replica's lag, seconds
	free       []point // free client connection slots
	rows       []point // the job's rows per second
	unreadable int     // primary_load samples that failed or were stale
	latency    []*Histogram
	done       []int
	steal      float64 // the window's steal share (Result.Steal)
	// stealPerSec is the steal share of each second from the start
	// (stealUnknown where /proc/stat could not be read): a burst the
	// window's share averages away.
	stealPerSec []float64
}

// sampleEvery is how often the independent sampler's snapshot is read;
// each reading stands for this long in the seconds-above counts.
const sampleEvery = 250 * time.Millisecond

// monitor is the independent sampler: its own signals.Poller, not the one
// pacing the job, so every policy is measured by the same instrument.
type monitor struct {
	p      *signals.Poller
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startMonitor(ctx context.Context, c *pgcluster.Cluster, cores int) (*monitor, error) {
	p, err := signals.New(signals.Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor),
		ReplicaDSNs: []string{c.Replica.DSN(pgcluster.RoleMonitor)}, Cores: float64(cores)})
	if err != nil {
		return nil, err
	}
	if err := p.Connect(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &monitor{p: p, cancel: cancel}
	m.wg.Go(func() { _ = p.Run(rctx) })
	return m, nil
}

func (m *monitor) close() {
	m.cancel()
	m.wg.Wait()
	m.p.Close()
}

// watch reads the sampler every sampleEvery from start to end, and the
// job's rows every second.
func (m *monitor) watch(ctx context.Context, start, end time.Time, job *jobs.Job) (s series) {
	if !sleepUntil(ctx, start) {
		return s
	}
	host, second := startSteal(), startSteal()
	// stealTo fills s.stealPerSec to n seconds with the share since the
	// last fill: entry i covers second i, to the sampler's tick, and a
	// late tick's reading (or the end's) stands for every second it spans.
	stealTo := func(n int) {
		if len(s.stealPerSec) >= n {
			return
		}
		v := second.share()
		for len(s.stealPerSec) < n {
			s.stealPerSec = append(s.stealPerSec, v)
		}
		second = startSteal()
	}
	defer func() {
		s.steal = host.share()
		stealTo(int(end.Sub(start).Round(time.Second) / time.Second))
	}()
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	var lastRows int64
	lastAt := start
	for {
		select {
		case <-ctx.Done():
			return s
		case now := <-t.C:
			if now.After(end) {
				return s
			}
			at := now.Sub(start).Seconds()
			stealTo(int(now.Sub(start) / time.Second))
			snap := m.p.Snapshot()
			if l, ok := snap.Get(signals.PrimaryLoad, nil); ok && l.Err == nil && !snap.Stale(l) {
				s.load = append(s.load, point{at, l.Value})
				s.raw = append(s.raw, point{at, l.Raw})
			} else {
				s.unreadable++
			}
			if l, ok := replicaLag(snap); ok {
				s.lag = append(s.lag, point{at, l.Raw})
			}
			if f, ok := snap.Get(signals.ConnectionHeadroom, nil); ok && f.Err == nil {
				s.free = append(s.free, point{at, f.Raw})
			}
			if job != nil && now.Sub(lastAt) >= time.Second {
				rows := job.Status().Rows
				s.rows = append(s.rows, point{at, float64(rows-lastRows) / now.Sub(lastAt).Seconds()})
				lastRows, lastAt = rows, now
			}
		}
	}
}

// summary is the sampler's verdict on a run: seconds of smoothed
// primary_load over its target and critical levels, readings taken and
// unreadable, and the largest replica lag in seconds.
func (m *monitor) summary(s series) (aboveTarget, aboveCritical float64, samples, unreadable int, maxLag float64) {
	step := sampleEvery.Seconds()
	for _, p := range s.load {
		if p.v > loadRule.Target {
			aboveTarget += step
		}
		if loadRule.Critical > 0 && p.v >= loadRule.Critical {
			aboveCritical += step
		}
	}
	for _, p := range s.lag {
		maxLag = max(maxLag, p.v)
	}
	return aboveTarget, aboveCritical, len(s.load) + s.unreadable, s.unreadable, maxLag
}
