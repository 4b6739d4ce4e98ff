package replay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/signals"
)

// sampleSeconds fills secs, second i from at: the independent sampler's
// smoothed load (its highest), the share of its readings at or over
// critical, the largest replica lag, the steal share and the rows the jobs
// cleaned; and, while an adaptive policy's window is open (working), what
// its own canary read and the budget and batch size its job ran at. It
// returns once the last second is filled or ctx ends.
func sampleSeconds(ctx context.Context, mon *monitor, at time.Time, secs []Second, rows *atomic.Int64, working *atomic.Pointer[blockJob]) {
	if !sleepUntil(ctx, at) {
		return
	}
	steal := startSteal()
	lastRows := rows.Load()
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	i, n, crit := 0, 0, 0
	load := -1.0
	var lag float64
	var pol policySecond
	for i < len(secs) {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			snap := mon.p.Snapshot()
			if l, ok := snap.Get(signals.PrimaryLoad, nil); ok && l.Err == nil && !snap.Stale(l) {
				load = max(load, l.Value)
				if loadRule.Critical > 0 && l.Value >= loadRule.Critical {
					crit++
				}
			}
			n++
			if l, ok := replicaLag(snap); ok {
				lag = max(lag, l.Raw)
			}
			// A tick that closes a second falls on a window's switch: which
			// window's policy it would read is a race, so it reads none.
			if now.Before(at.Add(time.Duration(i+1) * time.Second)) {
				pol.read(working.Load())
			}
			for i < len(secs) && !now.Before(at.Add(time.Duration(i+1)*time.Second)) {
				r := rows.Load()
				secs[i] = Second{T: i, Steal: steal.share(), Rows: r - lastRows, Load: load, Lag: lag,
					Canary: pol.canary, CanaryRaw: pol.raw, CanaryMs: pol.ms, Budget: pol.budget, Batch: pol.batch, App: pol.app, Why: pol.why}
				if n > 0 {
					secs[i].Critical = float64(crit) / float64(n)
				}
				lastRows, steal = r, startSteal()
				i, n, crit, load, lag, pol = i+1, 0, 0, -1, 0, policySecond{}
			}
		}
	}
}

// probeSQL is the product's canary statement without what it counts: one
// free row of the canary table bumped and committed.
const probeSQL = `UPDATE throttled.canary SET beats = beats + 1, beat_at = now()
WHERE slot = (SELECT slot FROM throttled.canary ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED)`

// probeEvery is how often the instrument's canary commits: the product's
// default interval.
const probeEvery = 50 * time.Millisecond

// probe commits probeSQL on conn every probeEvery until end or ctx ends,
// recording each latency in the second it was due.
func probe(ctx context.Context, conn *pgx.Conn, end time.Time, rec *recorder) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case due := <-t.C:
			if !due.Before(end) {
				return
			}
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := conn.Exec(qctx, probeSQL)
			cancel()
			rec.record(due, time.Since(due), err)
		}
	}
}

// policySecond is what an adaptive policy's own sampler and job read in
// one second: the highest of each.
type policySecond struct {
	canary, raw, ms, budget, app float64
	batch                        int
	why                          string
}

// read takes one reading of bj, if it is an adaptive policy's.
func (p *policySecond) read(bj *blockJob) {
	if bj == nil || bj.snapshot == nil {
		return
	}
	snap := bj.snapshot()
	if s, ok := snap.Get(signals.ForegroundLatency, nil); ok && s.Err == nil && !snap.Stale(s) {
		p.canary, p.raw = max(p.canary, s.Value), max(p.raw, s.Raw)
	}
	if s, ok := snap.Get(signals.ForegroundLatencySeconds, nil); ok && s.Err == nil && !snap.Stale(s) {
		p.ms = max(p.ms, s.Value*1e3)
	}
	if s, ok := snap.Get(AppSignalName, nil); ok && s.Err == nil && !snap.Stale(s) {
		p.app = max(p.app, s.Value)
	}
	if bj.job != nil {
		st := bj.job.Status()
		p.budget, p.batch = max(p.budget, st.Rate), max(p.batch, st.BatchSize)
		p.why = string(st.Code)
		if st.Binding.Signal != "" {
			p.why += ":" + string(st.Binding.Signal)
		}
	}
}
