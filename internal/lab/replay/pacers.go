package replay

import (
	"context"
	"sync"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"golang.org/x/time/rate"
)

// basePacer is the jobs.Pacer of the baselines: a token bucket (burst 1)
// behind an open/closed gate, both set by the baseline's rule.
type basePacer struct {
	lim *rate.Limiter

	mu      sync.Mutex
	open    bool
	changed chan struct{} // closed and replaced at every change
}

func newBasePacer(r rate.Limit) *basePacer {
	return &basePacer{lim: rate.NewLimiter(r, 1), open: true, changed: make(chan struct{})}
}

// Wait waits until the gate is open and a token is there.
func (p *basePacer) Wait(ctx context.Context) (func(int64, time.Duration, error), error) {
	for {
		p.mu.Lock()
		open, changed := p.open, p.changed
		p.mu.Unlock()
		if !open {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-changed:
				continue
			}
		}
		if err := p.lim.Wait(ctx); err != nil {
			// rate.Limiter refuses at once a token due after ctx's
			// deadline; the job is to see the deadline when it comes.
			<-ctx.Done()
			return nil, ctx.Err()
		}
		p.mu.Lock()
		open = p.open
		p.mu.Unlock()
		if open {
			return func(int64, time.Duration, error) {}, nil
		}
	}
}

// set changes the rate (batches per second) and opens or closes the gate.
func (p *basePacer) set(r rate.Limit, open bool) {
	p.lim.SetLimit(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	if open != p.open {
		p.open = open
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// Baseline limits, as in internal/lab/sim: every paced baseline starts at a
// tenth of the controller's default largest budget and never exceeds it.
const (
	baseMaxRate  = 100
	baseInitRate = baseMaxRate / 10
	baseMinRate  = 1
)

var (
	loadRule = throttle.DefaultRules()[signals.PrimaryLoad]
	lagRule  = throttle.DefaultRules()[signals.ReplicaLagSeconds]
)

// rule is a baseline's decision once a tick: the new rate and whether
// work may go.
type rule func(cur float64, snap signals.Snapshot) (next float64, open bool)

func replicaLag(snap signals.Snapshot) (signals.Sample, bool) {
	s, ok := snap.Get(signals.ReplicaLagSeconds, map[string]string{signals.LabelReplica: replicaName})
	return s, ok && s.Err == nil && !snap.Stale(s)
}

// lagOnly paces on replica lag alone, the safeguard of 2026-09-13:
// halve while the lag is over its target, grow by a tenth a second
// otherwise. It never looks at the primary's load.
func lagOnly(cur float64, snap signals.Snapshot) (float64, bool) {
	if lag, ok := replicaLag(snap); ok && lag.Value > lagRule.Target {
		return max(baseMinRate, cur/2), true
	}
	return min(baseMaxRate, cur*1.1), true
}

// binary is freno's go/no-go: full speed while primary_load and replica
// lag are under their targets, stopped while either is over or unknown.
func binary(_ float64, snap signals.Snapshot) (float64, bool) {
	load, ok := snap.Get(signals.PrimaryLoad, nil)
	lag, lagOK := replicaLag(snap)
	if !ok || load.Err != nil || snap.Stale(load) || !lagOK || load.Value > loadRule.Target || lag.Value > lagRule.Target {
		return baseMaxRate, false
	}
	return baseMaxRate, true
}

// pace applies r to p every tick, on poller's snapshots, until ctx ends.
func pace(ctx context.Context, p *basePacer, poller *signals.Poller, r rule, initial float64) {
	cur := initial
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var open bool
		cur, open = r(cur, poller.Snapshot())
		p.set(rate.Limit(cur), open)
	}
}
