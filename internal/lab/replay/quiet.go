package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// What the idle-primary and quiet-primary benchmarks (cmd/throttled's
// idle_bench_test.go and quiet_bench_test.go) borrow from the replay: the
// foreground's latency over a window of one run, a quick measure of the
// rate the foreground alone sustains, the steal meter and the wait for
// the replica.

// Window returns the latencies of the transactions scheduled within
// [from, to), by whole seconds of the foreground's clock (a second that
// straddles from or to is left out). Safe while the foreground runs.
func (f *Foreground) Window(from, to time.Time) *Histogram {
	h := NewHistogram()
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	first := int((from.Sub(f.rec.start) + time.Second - 1) / time.Second)
	last := int(to.Sub(f.rec.start) / time.Second) // exclusive
	for i := max(first, 0); i < last && i < len(f.rec.perSec); i++ {
		h.Merge(f.rec.perSec[i])
	}
	return h
}

// Failed is how many transactions failed or could not start so far.
func (f *Foreground) Failed() int64 {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	return f.rec.failed
}

// KneeStep is one rate of Knee's ramp.
type KneeStep struct {
	Rate, TPS float64
	P99       time.Duration
	Steal     float64
}

// Knee ramps the foreground alone from start transactions a second,
// calGrowth (1.5) times more each step of step, until its p99 bends as
// the replay's calibration decides it (over calBend times the median of
// the first three steps' p99, or fewer than 90 % of arrivals done, twice
// in a row at the same rate and once more at the next), and returns the
// last rate before the bend:
// what this machine's foreground sustains. It is the replay's coarse ramp
// alone (Calibrate goes on with fine ramps until two agree, minutes more),
// so it reads the knee within a step of 1.5 and no closer. maxSteps bounds
// the ramp; a ramp that never bends returns its last rate. The foreground
// must not be running.
func (f *Foreground) Knee(ctx context.Context, start float64, step time.Duration, maxSteps int, logf func(string, ...any)) (float64, []KneeStep, error) {
	var steps []KneeStep
	var base time.Duration
	once := func(r float64, n int) (KneeStep, error) {
		at := time.Now().Add(100 * time.Millisecond)
		rec := newRecorder(at)
		st := startSteal()
		f.g.run(ctx, r, at, step, uint64(1000+n), rec)
		s := KneeStep{Rate: r, TPS: float64(rec.ok) / step.Seconds(), P99: rec.all.Quantile(0.99), Steal: st.share()}
		steps = append(steps, s)
		if logf != nil {
			logf("knee ramp: %6.0f tx/s offered, %6.0f done, p99 %.1f ms, steal %s %%", s.Rate, s.TPS, ms(s.P99), stealText(s.Steal))
		}
		return s, ctx.Err()
	}
	bent := func(s KneeStep) bool { return s.P99 > calBend*base || s.TPS < 0.9*s.Rate }
	prev := 0.0
	r := start
	for i := range maxSteps {
		s, err := once(r, 2*i)
		if err != nil {
			return 0, steps, err
		}
		if i < 3 {
			ps := make([]CalibrationStep, 0, 3)
			for _, k := range steps {
				ps = append(ps, CalibrationStep{P99: k.P99})
			}
			base = baseP99(ps)
			prev, r = r, r*calGrowth
			continue
		}
		if bent(s) {
			if s, err = once(r, 2*i+1); err != nil {
				return 0, steps, err
			}
			if bent(s) {
				// And at the next rate: a stall of the host (a checkpoint,
				// a neighbour) can cover two 3 s steps, and it read knees
				// of 2,883 and 9,731 tx/s an hour apart on 2 cores. Past
				// the knee the next rate bends too.
				next, err := once(r*calGrowth, 2*i+2)
				if err != nil {
					return 0, steps, err
				}
				if bent(next) {
					return prev, steps, nil
				}
				prev, r = r*calGrowth, r*calGrowth*calGrowth
				continue
			}
		}
		prev, r = r, r*calGrowth
	}
	return prev, steps, nil
}

// StealMeter measures the share of the CPU time this machine's processes
// wanted that the hypervisor gave to other guests, from its start.
type StealMeter struct{ m stealMeter }

// StartSteal starts a StealMeter.
func StartSteal() StealMeter { return StealMeter{startSteal()} }

// Share is the steal share since the start, or -1 where /proc/stat cannot
// be read.
func (s StealMeter) Share() float64 { return s.m.share() }

// StealText formats a steal share as a percentage ("-" when unknown).
func StealText(s float64) string { return stealText(s) }

// Settle waits, for up to wait, until the replica has replayed the
// primary's WAL as of now, then has the kernel write dirty pages back: so
// that a measurement does not meet the last one's writes.
func Settle(ctx context.Context, c *pgcluster.Cluster, pool *pgxpool.Pool, wait time.Duration) error {
	if err := settle(ctx, c, pool, wait); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return nil
}
