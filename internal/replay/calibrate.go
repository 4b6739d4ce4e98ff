package replay

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Calibration is how the foreground arrival rate was chosen on this
// machine: the foreground alone, at rising arrival rates, until its mean
// raw primary_load reached Target or its p99 bent. A bend first means the
// machine's capacity for the foreground is the rate before it (the knee),
// and the run rate is KneeShare of that: a doubling surge then meets the
// knee, as a load of Target doubled meets critical.
type Calibration struct {
	// Target is the mean raw primary_load aimed at.
	Target float64
	// Steps are the rates tried, in order.
	Steps []CalibrationStep
	// Rate is the one chosen, transactions per second.
	Rate float64
	// Why says how the search ended.
	Why string
}

// CalibrationStep is one rate tried.
type CalibrationStep struct {
	Rate, TPS, Load float64
	P99             time.Duration
}

// Calibration limits: the first rate per core, the growth per step, and
// how far p99 may rise over the first step's before it counts as bent.
const (
	calStartPerCore = 25
	calGrowth       = 1.5
	calMaxSteps     = 16
	calBend         = 4
)

// baseP99 is the median p99 of the first (up to three) steps: the
// foreground's latency with room to spare, less noisy than one step's.
func baseP99(steps []CalibrationStep) time.Duration {
	var ps []time.Duration
	for _, s := range steps[:min(3, len(steps))] {
		ps = append(ps, s.P99)
	}
	slices.Sort(ps)
	return ps[len(ps)/2]
}

// KneeShare is the share of the knee's rate the runs offer when the
// foreground's latency bends before its load reaches the target: a
// doubling surge then peaks at half the knee. The knee is found in steps
// of seconds, and a 35 s run finds it lower: at half of it, the surge met
// the knee itself, and at 0.7 of it foreground alone's p99 over the surge
// was still whether a queue happened to collapse (2.2 ms in one run,
// 5.2 ms in the next; 66 ms at 0.9), not anything a pacing policy did.
const KneeShare = 0.25

// Calibrate ramps the foreground alone until its p99 bends (more than
// calBend times the median of the first steps', or fewer completions than
// 90 % of arrivals, twice in a row at the same rate: the runs offer
// KneeShare of the rate before) or,
// failing that, its mean raw primary_load reaches cfg.CalibrateTarget (the
// rate is then interpolated between the last two steps), so a run means
// the same load on 2 cores as on 64. The bend is checked first: a step
// past the knee can read any load.
func Calibrate(ctx context.Context, cfg Config, gen *generator) (*Calibration, error) {
	cfg.fill()
	mon, err := startMonitor(ctx, cfg.Cluster, cfg.Cores)
	if err != nil {
		return nil, err
	}
	defer mon.close()
	cal := &Calibration{Target: cfg.CalibrateTarget}
	r := float64(calStartPerCore * cfg.Cores)
	step := func(i int) CalibrationStep {
		start := time.Now().Add(200 * time.Millisecond)
		rec := newRecorder(start)
		done := make(chan struct{})
		go func() { gen.run(ctx, r, start, cfg.CalibrateStep, cfg.Seed+uint64(i), rec); close(done) }()
		s := mon.watch(ctx, start, start.Add(cfg.CalibrateStep), nil)
		<-done
		var sum float64
		for _, p := range s.raw {
			sum += p.v
		}
		st := CalibrationStep{Rate: r, TPS: float64(rec.ok) / cfg.CalibrateStep.Seconds(), P99: rec.all.Quantile(0.99)}
		if len(s.raw) > 0 {
			st.Load = sum / float64(len(s.raw))
		}
		cal.Steps = append(cal.Steps, st)
		cfg.Log("calibration: %6.0f tx/s offered, %6.0f done, load %.2f, p99 %.1f ms", st.Rate, st.TPS, st.Load, ms(st.P99))
		return st
	}
	bent := func(st CalibrationStep, base time.Duration) bool {
		return st.P99 > calBend*base || st.TPS < 0.9*st.Rate
	}
	for i := range calMaxSteps {
		st := step(i)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		base := baseP99(cal.Steps)
		if i > 0 && bent(st, base) {
			// A bend must show twice at the same rate: one stray stall
			// (a checkpoint, the host taking a core for a moment) ended
			// earlier calibrations at a third of the machine's knee.
			st = step(i)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		prev := func() CalibrationStep {
			for j := len(cal.Steps) - 2; j >= 0; j-- {
				if cal.Steps[j].Rate < st.Rate {
					return cal.Steps[j]
				}
			}
			return cal.Steps[0]
		}
		switch {
		case i > 0 && bent(st, base):
			// The bend comes first: a step whose latency bent is past the
			// knee whatever its load read.
			prev := prev()
			cal.Rate = KneeShare * prev.Rate
			cal.Why = fmt.Sprintf("p99 bent at %.0f tx/s (%.1f ms against %.1f ms at the first steps; %.0f done) before load reached %.2f; %.0f%% of the %.0f tx/s before it",
				st.Rate, ms(st.P99), ms(base), st.TPS, cal.Target, 100*KneeShare, prev.Rate)
			return cal, nil
		case st.Load >= cal.Target && i > 0:
			prev := prev()
			f := (cal.Target - prev.Load) / max(st.Load-prev.Load, 1e-9)
			cal.Rate = prev.Rate + min(max(f, 0), 1)*(st.Rate-prev.Rate)
			cal.Why = fmt.Sprintf("mean primary_load reached %.2f; rate interpolated to the target", cal.Target)
			return cal, nil
		case st.Load >= cal.Target:
			cal.Rate = r * cal.Target / st.Load
			cal.Why = "the first rate already passed the target; scaled down in proportion"
			return cal, nil
		}
		r *= calGrowth
	}
	last := cal.Steps[len(cal.Steps)-1].Rate
	cal.Rate = KneeShare * last
	cal.Why = fmt.Sprintf("neither the target nor a bend within %d steps; %.0f%% of the last, %.0f tx/s", calMaxSteps, 100*KneeShare, last)
	return cal, nil
}
