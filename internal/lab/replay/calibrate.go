package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Calibration is how the foreground arrival rate was chosen on this
// machine: the foreground alone, at rising arrival rates, until its mean
// raw primary_load reached Target or its p99 bent. A bend first means the
// machine's capacity for the foreground is the rate before it (the knee),
// and the run rate is KneeShare of that: a doubling surge then meets the
// knee, as a load of Target doubled meets critical.
//
// One ramp's knee is not a measurement: on a 2-core machine, ramps a few
// minutes apart found knees 1.5 and 2.2 times apart. So a coarse ramp
// finds where the knee is, and fine ramps measure it until two agree
// within CalAgree; when CalMaxRamps fine ramps never do, calibration
// fails rather than size an hour of runs on a moving host. The lower of
// the two that agreed is used.
type Calibration struct {
	// Target is the mean raw primary_load aimed at.
	Target float64
	// Steps are the rates tried, in order.
	Steps []CalibrationStep
	// Readings are the run rates each ramp found, the coarse one first.
	Readings []float64
	// Rate is the one chosen, transactions per second.
	Rate float64
	// Why says how the search ended.
	Why string
}

// CalibrationStep is one rate tried.
type CalibrationStep struct {
	// Ramp is the ramp the step belongs to: 0 is the coarse one.
	Ramp            int
	Rate, TPS, Load float64
	P99             time.Duration
	// Steal is the step's steal share (Result.Steal), after any
	// re-measurement.
	Steal float64
}

// Calibration limits: the first rate per core, the coarse and the fine
// growth per step, the steps a ramp may take, how far p99 may rise over
// the first steps' before it counts as bent, how far apart two fine
// readings may be and still agree, and how many fine ramps may run.
const (
	calStartPerCore = 25
	calGrowth       = 1.5
	calFineGrowth   = 1.1
	calMaxSteps     = 16
	calFineSteps    = 20
	calBend         = 4
	CalAgree        = 1.2
	CalMaxRamps     = 4
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

// Calibrate measures the arrival rate on this machine's pair (see
// Calibration and search).
func Calibrate(ctx context.Context, cfg Config, gen *generator) (*Calibration, error) {
	cfg.fill()
	mon, err := startMonitor(ctx, cfg.Cluster, cfg.Cores)
	if err != nil {
		return nil, err
	}
	defer mon.close()
	i := 0
	once := func(r float64) (CalibrationStep, error) {
		i++
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
		st := CalibrationStep{Rate: r, TPS: float64(rec.ok) / cfg.CalibrateStep.Seconds(), P99: rec.all.Quantile(0.99), Steal: s.steal}
		if len(s.raw) > 0 {
			st.Load = sum / float64(len(s.raw))
		}
		return st, ctx.Err()
	}
	// A step the hypervisor took the CPUs from measured its neighbours:
	// on this 2-core VM such steps read knees that fell and rose by half
	// from ramp to ramp, and calibration failed. It is measured again,
	// as a run is.
	measure := func(r float64) (CalibrationStep, error) {
		st, _, err := undisturbed(cfg.MaxSteal, cfg.Reruns, func(st CalibrationStep) float64 { return st.Steal }, func() (CalibrationStep, error) { return once(r) },
			func(st CalibrationStep) {
				cfg.Log("calibration: %.0f tx/s measured again: the hypervisor took %s %% of the CPU time (over %s %%)", r, stealText(st.Steal), stealText(cfg.MaxSteal))
			})
		return st, err
	}
	return search(cfg.CalibrateTarget, float64(calStartPerCore*cfg.Cores), measure, cfg.Log)
}

// search ramps the foreground alone until its p99 bends (more than
// calBend times the median of the first steps', or fewer completions
// than 90 % of arrivals, twice in a row at the same rate: the runs offer
// KneeShare of the rate before) or, failing that, its mean raw
// primary_load reaches target (the rate is then interpolated between the
// last two steps), so a run means the same load on 2 cores as on 64. The
// bend is checked first: a step past the knee can read any load.
//
// The first ramp is coarse (calGrowth per step, from start). Then fine
// ramps (calFineGrowth per step, from a coarse step below the lowest
// knee so far) measure again until two of them agree within CalAgree, or
// CalMaxRamps ran, which is an error. The rate is the lower of the two
// that agreed.
func search(target, start float64, measure func(rate float64) (CalibrationStep, error), logf func(string, ...any)) (*Calibration, error) {
	cal := &Calibration{Target: target}
	var base time.Duration
	var why []string
	// ramp returns the run rate it found and the knee (or, when the load
	// reached the target, the rate itself) the next fine ramp starts
	// below.
	ramp := func(n int, r, growth float64, steps int) (rate, knee float64, err error) {
		step := func() (CalibrationStep, error) {
			st, err := measure(r)
			st.Ramp, st.Rate = n, r
			if err != nil {
				return st, err
			}
			cal.Steps = append(cal.Steps, st)
			if n == 0 && len(cal.Steps) <= 3 {
				base = baseP99(cal.Steps)
			}
			logf("calibration ramp %d: %6.0f tx/s offered, %6.0f done, load %.2f, p99 %.1f ms, steal %s %%", n, st.Rate, st.TPS, st.Load, ms(st.P99), stealText(st.Steal))
			return st, nil
		}
		bent := func(st CalibrationStep) bool {
			return st.P99 > calBend*base || st.TPS < 0.9*st.Rate
		}
		var prev *CalibrationStep
		for i := range steps {
			st, err := step()
			if err != nil {
				return 0, 0, err
			}
			if (i > 0 || n > 0) && bent(st) || st.Load >= target {
				// A bend must show twice at the same rate: one stray stall
				// (a checkpoint, the host taking a core for a moment) ended
				// earlier calibrations at a third of the machine's knee.
				// So must the load: on 2 cores one 4 s step read 0.73 at a
				// rate whose neighbours read 0.2 to 0.4.
				if st, err = step(); err != nil {
					return 0, 0, err
				}
			}
			switch {
			case (i > 0 || n > 0) && bent(st):
				// The bend comes first: a step whose latency bent is past
				// the knee whatever its load read.
				if prev == nil {
					why = append(why, fmt.Sprintf("ramp %d bent at its first rate, %.0f tx/s", n, st.Rate))
					return KneeShare * st.Rate / growth, st.Rate / growth, nil
				}
				why = append(why, fmt.Sprintf("ramp %d: p99 bent at %.0f tx/s (%.1f ms against %.1f ms at the first steps; %.0f done), knee %.0f", n, st.Rate, ms(st.P99), ms(base), st.TPS, prev.Rate))
				return KneeShare * prev.Rate, prev.Rate, nil
			case st.Load >= target && prev != nil:
				f := (target - prev.Load) / max(st.Load-prev.Load, 1e-9)
				rate := prev.Rate + min(max(f, 0), 1)*(st.Rate-prev.Rate)
				why = append(why, fmt.Sprintf("ramp %d: mean primary_load reached %.2f at %.0f tx/s", n, target, rate))
				return rate, rate, nil
			case st.Load >= target:
				why = append(why, fmt.Sprintf("ramp %d: its first rate already passed load %.2f; scaled down in proportion", n, target))
				return st.Rate * target / st.Load, st.Rate * target / st.Load, nil
			}
			prev = &st
			r *= growth
		}
		why = append(why, fmt.Sprintf("ramp %d: neither the target nor a bend within %d steps, up to %.0f tx/s", n, steps, prev.Rate))
		return KneeShare * prev.Rate, prev.Rate, nil
	}
	first, knee, err := ramp(0, start, calGrowth, calMaxSteps)
	if err != nil {
		return nil, err
	}
	cal.Readings = []float64{first}
	var fine []float64
	var agreed string
	var pair [2]float64
	for n := 1; n <= CalMaxRamps && agreed == ""; n++ {
		// Start a coarse step below the lowest knee so far: the knee is
		// within a coarse step above the last rate that did not bend.
		r, k, err := ramp(n, knee/calGrowth, calFineGrowth, calFineSteps)
		if err != nil {
			return nil, err
		}
		knee = min(knee, k)
		cal.Readings = append(cal.Readings, r)
		fine = append(fine, r)
		for i, a := range fine[:len(fine)-1] {
			if hi, lo := max(a, r), min(a, r); hi <= CalAgree*lo {
				agreed = fmt.Sprintf("fine ramps %d and %d agreed within %.0f%% (%.0f and %.0f tx/s)", i+1, n, 100*(CalAgree-1), a, r)
				pair = [2]float64{a, r}
				break
			}
		}
	}
	if agreed == "" {
		// A knee that moves by more than CalAgree from ramp to ramp is the
		// host's capacity moving while it was measured (a neighbour, a
		// replica still replaying, the kernel writing back): an hour of
		// runs sized on any one reading would measure that, not the
		// policies.
		return nil, fmt.Errorf("replay: calibration did not settle: no two of %d fine ramps agreed within %.0f%% (run rates %.0f tx/s; %s); run it again on a quieter machine, or give --rate",
			len(fine), 100*(CalAgree-1), fine, strings.Join(why, "; "))
	}
	// The lower of the two: the runs take an hour, and they will meet the
	// machine's slower moments too. Sized to a faster reading, a doubling
	// surge met the knee whenever the host was slow, and foreground
	// alone's p99 said which runs it had happened in. A reading that
	// agreed with none is a moment, not the machine, and is not used.
	cal.Rate = min(pair[0], pair[1])
	cal.Why = fmt.Sprintf("%s. Then %s; the lower is used", strings.Join(why, "; "), agreed)
	return cal, nil
}
