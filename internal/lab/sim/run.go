package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// epoch is the simulated wall clock at t = 0.
var epoch = time.Date(2026, 9, 13, 7, 33, 0, 0, time.UTC)

// Point is the state of one tick of a run.
type Point struct {
	T        float64 // seconds since the start
	Load     float64 // true primary_load
	Measured float64 // smoothed primary_load as sampled
	Rate     float64 // background batches per second allowed
	Done     float64 // background batches per second that succeeded
	Oracle   float64 // the oracle's rate
	Lag      float64 // true replica lag, seconds
	// Pending is archive_pending_segments after the tick.
	Pending float64
	// Horizon is xmin_horizon_age_seconds after the tick.
	Horizon float64
	// DeadRows is the rows the jobs deleted that vacuum cannot remove
	// yet: those deleted while a long transaction holds the horizon.
	DeadRows float64
	// P99Ratio is the foreground's p99 over what it would be with no job,
	// from the latency model of the scenario's counterpart (an output: no
	// policy reads it).
	P99Ratio float64
	// Canary is the canary's raw foreground_latency ratio over the tick,
	// from the canary model of the scenario's counterpart: what the
	// poller emits (smoothed) as signals.ForegroundLatency, a tick or
	// more later as every sample. Only adaptive with Options.CanaryTarget
	// acts on it.
	Canary float64
	Mode   string
}

// Result measures one policy on one scenario.
type Result struct {
	Scenario string `json:"scenario"`
	Policy   string `json:"policy"`
	Seed     uint64 `json:"seed"`
	// TimeAboveTarget and TimeAboveCritical are seconds with the true
	// primary_load over target (0.7) and at or over critical (1.0).
	TimeAboveTarget   float64 `json:"time_above_target_s"`
	TimeAboveCritical float64 `json:"time_above_critical_s"`
	// FirstCut is seconds from the scenario's disturbance to the first
	// cut in the rate; nil where the scenario has none or no cut came.
	FirstCut *float64 `json:"first_cut_s"`
	// Efficiency is the background work done over the oracle's.
	Efficiency float64 `json:"efficiency"`
	// ReversalsPer10Min counts changes of direction of the rate.
	ReversalsPer10Min float64 `json:"reversals_per_10min"`
	// WorkWhilePaused is the batches done while a hold applied or the
	// primary's samples were older than their max_age.
	WorkWhilePaused float64 `json:"work_while_paused"`
	// Work and OracleWork are total successful batches.
	Work       float64 `json:"work"`
	OracleWork float64 `json:"oracle_work"`
	// JobWork is each job's successful batches.
	JobWork map[status.Job]float64 `json:"job_work"`
	// FixedRate is the rate the fixed policy ran at (the best in
	// hindsight); 0 for other policies.
	FixedRate float64 `json:"fixed_rate,omitempty"`
	// MaxArchivePending is the most WAL segments waiting for the
	// archiver at any tick.
	MaxArchivePending float64 `json:"max_archive_pending_segments"`
	// UnreclaimableDeadRows is the most rows the jobs had deleted that
	// vacuum could not remove, because a long transaction held the xmin
	// horizon: bloat made instead of space freed.
	UnreclaimableDeadRows float64 `json:"unreclaimable_dead_rows"`
	// P99RatioMedian is the median over the run's seconds of the
	// foreground's p99 ratio (Point.P99Ratio); P99OverGoalShare the share
	// of seconds with it over 1.10, the replay's goal. The fitted noise
	// alone puts some seconds over 1.10 with no job at all (see
	// docs/SIMULATION.md, the latency model).
	P99RatioMedian   float64 `json:"p99_ratio_median"`
	P99OverGoalShare float64 `json:"p99_ratio_over_1_10_share"`
	// WindowP99Median is the median over the run's WindowSeconds-long
	// windows of each window's pooled p99 ratio ([WindowRatio] of its
	// seconds'): the replay's reading of a closed-loop window.
	WindowP99Median float64 `json:"window_p99_ratio_median"`
	// Counterpart is the replay scenario whose latency model gave them.
	Counterpart string `json:"latency_counterpart"`
	// CanaryRatioMedian is the median over the run's seconds of the
	// canary's raw ratio (Point.Canary); CanaryCounterpart the probe
	// scenario whose canary model gave it.
	CanaryRatioMedian float64 `json:"canary_ratio_median"`
	CanaryCounterpart string  `json:"canary_counterpart"`
	// CanaryTarget is the foreground_latency rule's target adaptive ran
	// with (Options.CanaryTarget); 0 without the rule.
	CanaryTarget float64 `json:"canary_target,omitempty"`
	Series       []Point `json:"-"`
}

// Options change how adaptive runs, and what the canary reads; the zero
// value is the product's defaults without a canary rule, as the
// comparison table runs it. The baselines ignore the controller's
// options, and fixed all of them.
type Options struct {
	// CanaryTarget, over 1, adds the product's foreground_latency rule
	// (throttle.DefaultForegroundLatencyRule: required) with this target
	// to adaptive's rules, as throttled.Open adds it where the canary can
	// run.
	CanaryTarget float64
	// MaxGrowth, GrowEvery and BreachMemory set the controller's
	// (throttle.Config); 0 keeps its defaults.
	MaxGrowth    float64
	GrowEvery    int
	BreachMemory time.Duration
	// CanaryNoise scales the canary's fitted noise (the spread of ln
	// ratio its model drew from the replay's pairs): 0 keeps it as
	// fitted, under 0 draws none. It changes only what the canary reads.
	CanaryNoise float64
}

// check reports an option the controller would refuse.
func (o Options) check() error {
	if o.CanaryTarget != 0 {
		if err := throttle.CheckForegroundTarget(o.CanaryTarget); err != nil {
			return fmt.Errorf("sim: canary target %w", err)
		}
	}
	switch {
	case o.MaxGrowth != 0 && !(o.MaxGrowth > 1):
		return fmt.Errorf("sim: max growth %v; want over 1", o.MaxGrowth)
	case o.GrowEvery < 0:
		return fmt.Errorf("sim: grow every %d ticks; want 1 or more", o.GrowEvery)
	case o.BreachMemory < 0:
		return fmt.Errorf("sim: breach memory %s; want 0 (the default) or more", o.BreachMemory)
	}
	return nil
}

// Run simulates policy on scenario with seed. The run is deterministic:
// the same arguments give the same Result.
func Run(sc Scenario, policy string, seed uint64) (Result, error) {
	return RunWith(sc, policy, seed, Options{})
}

// RunWith is Run with adaptive changed by o.
func RunWith(sc Scenario, policy string, seed uint64, o Options) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	if policy == "fixed" {
		rate := bestFixedRate(sc, seed)
		r, err := run(sc, policy, rate, seed, Options{})
		r.FixedRate = rate
		return r, err
	}
	return run(sc, policy, 0, seed, o)
}

// bestFixedRate is the highest constant rate that adds no time over
// target, and none at or over critical, to what the foreground alone
// causes: the best a person could have picked knowing the whole scenario
// in advance.
func bestFixedRate(sc Scenario, seed uint64) float64 {
	measure := func(rate float64) (float64, float64) {
		r, _ := run(sc, "fixed", rate, seed, Options{})
		return r.TimeAboveTarget, r.TimeAboveCritical
	}
	floorTarget, floorCritical := measure(0)
	ok := func(rate float64) bool {
		t, c := measure(rate)
		return t <= floorTarget && c <= floorCritical
	}
	lo, hi := 0.0, maxBudget
	if ok(hi) {
		return hi
	}
	for range 20 {
		mid := (lo + hi) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// state is the plant over one tick.
type state struct {
	load, used, lagBytes, lagSeconds, jobSessions float64
	// wal is the WAL written over the tick, bytes per second; pending
	// the segments waiting for the archiver after it.
	wal, pending float64
	// horizonSecs and horizonXIDs are the xmin horizon's age after the
	// tick; held whether a long transaction holds it.
	horizonSecs, horizonXIDs float64
	held                     bool
	// canary is the canary's raw ratio over the tick.
	canary float64
}

// errWALWarmup is the WAL rate's error before two ticks of readings, as
// the sampler's before its first window.
var errWALWarmup = errors.New("sim: the WAL rate needs readings over 2 s")

// archiver ships completed WAL segments at a fixed rate.
type archiver struct {
	written float64 // bytes of WAL written since the start
	shipped float64 // segments archived
	credit  float64 // segments' worth of shipping time not yet used
}

// step writes wal bytes and ships for one tick at rate segments per
// second (none with archive_mode off, which keeps nothing pending). It
// returns the segments left waiting: complete ones not yet shipped.
func (a *archiver) step(wal float64, rate func(float64) float64, t float64) float64 {
	a.written += wal
	done := math.Floor(a.written / segmentBytes)
	if rate == nil {
		a.shipped = done
		return 0
	}
	a.credit += rate(t) * tickSeconds
	ready := done - a.shipped
	ship := min(math.Floor(a.credit), ready)
	a.shipped += ship
	a.credit -= ship
	if ready == ship {
		a.credit = 0 // an idle archiver banks no time
	}
	return done - a.shipped
}

// observe is what the sampler reads at now from the plant's state seen:
// primary_load as smoothed and raw, the other signals as they are. The
// WAL rate is over seen and the tick before it, prev, and an error while
// there is none. The horizon's holder is named while sc's long
// transaction holds it.
func observe(sc Scenario, seen state, prev *state, smoothed, raw, canarySmoothed float64, now time.Time) []signals.Sample {
	walRate := signals.Sample{Name: signals.WALBytesPerSecond, Unit: signals.UnitBytesPerSecond, At: now, Err: errWALWarmup}
	if prev != nil {
		bps := (seen.wal + prev.wal) / 2
		walRate.Value, walRate.Raw, walRate.Err = bps, bps, nil
	}
	replica := map[string]string{signals.LabelReplica: "replica1"}
	out := []signals.Sample{
		{Name: signals.PrimaryLoad, Value: smoothed, Raw: raw, Unit: signals.UnitPerCore, At: now},
		{Name: signals.ConnectionUsedFraction, Value: seen.used, Raw: seen.used, Unit: signals.UnitRatio, At: now},
		{Name: signals.PrimaryJobSessions, Value: seen.jobSessions, Raw: seen.jobSessions, Unit: signals.UnitSessions, At: now},
		{Name: signals.ReplicaLagBytes, Labels: replica, Value: seen.lagBytes, Raw: seen.lagBytes, Unit: signals.UnitBytes, At: now},
		{Name: signals.ReplicaLagSeconds, Labels: replica, Value: seen.lagSeconds, Raw: seen.lagSeconds, Unit: signals.UnitSeconds, At: now},
		walRate,
		{Name: signals.ArchivePendingSegments, Value: seen.pending, Raw: seen.pending, Unit: signals.UnitSegments, At: now},
		{Name: signals.ArchiveFailing, Value: 0, Raw: 0, Unit: signals.UnitBool, At: now},
		{Name: signals.XminHorizonAgeXIDs, Value: seen.horizonXIDs, Raw: seen.horizonXIDs, Unit: signals.UnitXIDs, At: now},
		{Name: signals.XminHorizonAgeSeconds, Value: seen.horizonSecs, Raw: seen.horizonSecs, Unit: signals.UnitSeconds, At: now},
		{Name: signals.ForegroundLatency, Value: canarySmoothed, Raw: seen.canary, Unit: signals.UnitRatio, At: now},
	}
	if seen.held {
		out = append(out, signals.Sample{Name: signals.XminHorizonHolder,
			Labels: map[string]string{signals.LabelHolderKind: sc.LongTx.Kind, signals.LabelHolder: sc.LongTx.Holder},
			Value:  seen.horizonXIDs, Raw: seen.horizonXIDs, Unit: signals.UnitXIDs, At: now})
	}
	return out
}

func run(sc Scenario, policyName string, fixedRate float64, seed uint64, o Options) (Result, error) {
	held := func(now time.Time) bool { return sc.Held(now.Sub(epoch).Seconds()) }
	p, err := newPolicy(policyName, sc, fixedRate, held, o)
	if err != nil {
		return Result{}, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x7468726f74746c65))
	// The latency model's noise has a stream of its own, so the plant's
	// and the controller's draws are what they were without it.
	lat := latency{m: sc.LatencyModel(), rng: rand.New(rand.NewPCG(seed, 0x6c6174656e637921))}
	// So has the canary's: the other columns are what they were whether
	// or not a policy reads it.
	can := canary{m: sc.CanaryModel(), rng: rand.New(rand.NewPCG(seed, 0x63616e6172792121))}
	switch {
	case o.CanaryNoise < 0:
		can.m.ResidualSD = 0
	case o.CanaryNoise > 0:
		can.m.ResidualSD *= o.CanaryNoise
	}
	res := Result{Scenario: sc.Name, Policy: policyName, Seed: seed, JobWork: map[status.Job]float64{}}
	if policyName == "adaptive" {
		res.CanaryTarget = o.CanaryTarget
	}
	var (
		history  []state
		lagBytes float64
		smoothed float64
		smoothOK bool
		last     []signals.Sample           // the latest samples
		lastAt   time.Time                  // when they were taken
		carry    = map[status.Job]float64{} // fractional batches carried to the next tick
		rates    []float64
		cutFound bool
		arch     archiver
		xids     float64 // transaction IDs spent since the start
		xidsAt   float64 // xids when the long transaction began
		deadRows float64 // rows deleted that vacuum cannot remove yet
		p99s     []float64
		canaries []float64
		// the canary's smoothed ratio, as the sampler's EWMA
		canarySmoothed float64
	)
	horizonRule, horizonRuled := sc.Rules[signals.XminHorizonAgeSeconds]
	const maxAge = signals.DefaultMaxAge
	for tick := 0; tick < sc.Duration; tick++ {
		t := float64(tick) * tickSeconds
		now := epoch.Add(time.Duration(t * float64(time.Second)))
		cores := sc.Cores(t)

		// What the sampler sees: the plant over the last tick, Delay
		// ticks late, with noise. While samples drop out, the last ones
		// stay and age.
		if !sc.Dropout(t) {
			// Before the first tick the primary carried its foreground alone.
			seen := state{load: load(sc.Foreground(0)/sc.Cores(0), sc.Cores(0)), used: 0.4, canary: 1}
			var prev *state // the tick before seen, for the WAL rate
			if k := tick - 1 - sc.Delay; k >= 0 {
				seen = history[k]
				if k >= 1 {
					prev = &history[k-1]
				}
			}
			raw := max(0, seen.load*(1+noiseSigma*rng.NormFloat64()))
			if !smoothOK {
				smoothed, smoothOK = raw, true
				canarySmoothed = seen.canary
			} else {
				smoothed += (1 - math.Exp(-tickSeconds/smoothingTau)) * (raw - smoothed)
				canarySmoothed += (1 - math.Exp(-tickSeconds/canaryTau)) * (seen.canary - canarySmoothed)
			}
			last = observe(sc, seen, prev, smoothed, raw, canarySmoothed, now)
			lastAt = now
		}
		snap := signals.Snapshot{At: now, MaxAge: maxAge, Samples: last}
		mustStop := held(now) || now.Sub(lastAt) > maxAge

		jobRates, mode := p.Decide(now, snap)
		if !p.HonoursHolds() && held(now) {
			jobRates, mode = map[status.Job]float64{}, "paused"
		}

		// The plant over [t, t+1): background at min(allowed, wanted).
		errRate := sc.ErrorRate(t)
		var total, done float64
		perJob := map[status.Job]float64{}
		for _, j := range sc.Jobs {
			r := min(jobRates[j.Name], j.Demand(t))
			perJob[j.Name] = r
			total += r
			if w, ok := p.(wanter); ok && j.Demand(t) > jobRates[j.Name] {
				w.Wanted(j.Name) // its workers wait for their limiter
			}
		}
		fg := sc.Foreground(t)
		u := (fg + total*cpuPerBatch) / cores
		l := load(u, cores)
		dur := batchDuration(u, cores)
		for _, j := range sc.Jobs {
			r := perJob[j.Name]
			n := r*tickSeconds + carry[j.Name]
			whole := math.Floor(n)
			carry[j.Name] = n - whole
			fails := math.Round(whole * errRate)
			for i := 0; i < int(whole); i++ {
				var err error
				if i < int(fails) {
					err = errBatch
				}
				p.Report(j.Name, throttle.Feedback{Rows: 1000, Duration: time.Duration(dur * float64(time.Second)), Err: err})
			}
			res.JobWork[j.Name] += r * (1 - errRate) * tickSeconds
			done += r * (1 - errRate)
		}
		apply := sc.Apply(t)
		wal := fg*fgWALPerCore + total*sc.walPerBatch()
		lagBytes = max(0, lagBytes+(wal-apply)*tickSeconds)
		pending := arch.step(wal*tickSeconds, sc.Archive, t)
		// The horizon after the tick: a long transaction's age, in
		// seconds and in the transaction IDs spent since it began (each
		// batch spends one); the rows deleted meanwhile are dead rows
		// vacuum cannot remove until it ends.
		end := t + tickSeconds
		xids += (fg*fgXIDsPerCore + total) * tickSeconds
		var horizonSecs, horizonXIDs float64
		txOpen := sc.LongTx.open(end)
		if txOpen {
			since := min(tickSeconds, end-sc.LongTx.Start) // of this tick
			if !sc.LongTx.open(t) {
				xidsAt = xids - (fg*fgXIDsPerCore+total)*since
			}
			deadRows += done * rowsPerBatch * since
			horizonSecs, horizonXIDs = end-sc.LongTx.Start, xids-xidsAt
		} else {
			deadRows = 0 // vacuum may remove them now
		}
		canaryRaw := can.ratio(done * rowsPerBatch)
		st := state{
			canary:      canaryRaw,
			load:        l,
			used:        min(1.5, (40+total*dur)/usableConns),
			lagBytes:    lagBytes,
			lagSeconds:  lagBytes / apply,
			jobSessions: total * dur,
			wal:         wal,
			pending:     pending,
			horizonSecs: horizonSecs,
			horizonXIDs: horizonXIDs,
			held:        txOpen,
		}
		history = append(history, st)

		oracle := 0.0
		if !held(now) {
			uStar := utilisationAt(target, cores)
			byLoad := max(0, (uStar*cores-fg)/cpuPerBatch)
			byLag := max(0, (apply-fg*fgWALPerCore)/walPerBatch)
			var demand float64
			for _, j := range sc.Jobs {
				demand += j.Demand(t)
			}
			oracle = min(byLoad, byLag, demand) * (1 - errRate)
			if sc.Archive != nil {
				// The archiver's backlog must not grow either.
				byArchive := max(0, (sc.Archive(t)*segmentBytes-fg*fgWALPerCore)/sc.walPerBatch())
				oracle = min(oracle, byArchive*(1-errRate))
			}
			if horizonRuled && sc.LongTx.open(t) && t-sc.LongTx.Start > horizonRule.Target {
				// Past its target age the horizon allows no work: every
				// row deleted is bloat.
				oracle = 0
			}
		}

		if l > target {
			res.TimeAboveTarget += tickSeconds
		}
		if l >= critical {
			res.TimeAboveCritical += tickSeconds
		}
		if mustStop {
			res.WorkWhilePaused += done * tickSeconds
		}
		res.Work += done * tickSeconds
		res.OracleWork += oracle * tickSeconds
		if sc.SpikeAt >= 0 && !cutFound && t > sc.SpikeAt && len(rates) > 0 {
			prevRate := rates[int(sc.SpikeAt/tickSeconds)]
			if total < prevRate*0.999 {
				first := t - sc.SpikeAt
				res.FirstCut, cutFound = &first, true
			}
		}
		res.MaxArchivePending = max(res.MaxArchivePending, pending)
		res.UnreclaimableDeadRows = max(res.UnreclaimableDeadRows, deadRows)
		rates = append(rates, total)
		p99 := lat.ratio(done * rowsPerBatch)
		p99s = append(p99s, p99)
		canaries = append(canaries, canaryRaw)
		res.Series = append(res.Series, Point{T: t, Load: l, Measured: smoothed, Rate: total, Done: done, Oracle: oracle, Lag: st.lagSeconds,
			Pending: pending, Horizon: horizonSecs, DeadRows: deadRows, P99Ratio: p99, Canary: canaryRaw, Mode: mode})
	}
	res.Counterpart = lat.m.Scenario
	res.CanaryCounterpart = can.m.Scenario
	res.CanaryRatioMedian, _ = p99Summary(canaries)
	res.P99RatioMedian, res.P99OverGoalShare = p99Summary(p99s)
	res.WindowP99Median = windowP99Median(p99s, lat.m.AloneLogSD)
	if res.OracleWork > 0 {
		res.Efficiency = res.Work / res.OracleWork
	}
	res.ReversalsPer10Min = float64(reversals(rates)) * 600 / float64(sc.Duration)
	return res, nil
}

var errBatch = errors.New("sim: batch failed")

// WindowSeconds is the length of the windows [Result.WindowP99Median]
// pools: the replay's closed-loop windows'.
const WindowSeconds = 20

// windowP99Median is the median of the pooled p99 ratios of the
// consecutive WindowSeconds-long windows of per-tick ratios rs (a last,
// shorter window left out unless it is the only one).
func windowP99Median(rs []float64, sd float64) float64 {
	n := int(WindowSeconds / tickSeconds)
	var ws []float64
	for i := 0; i+n <= len(rs); i += n {
		ws = append(ws, WindowRatio(rs[i:i+n], sd))
	}
	if len(ws) == 0 {
		ws = append(ws, WindowRatio(rs, sd))
	}
	m, _ := p99Summary(ws)
	return m
}

// p99Summary is the median of a run's per-second p99 ratios and the
// share of them over P99Goal.
func p99Summary(xs []float64) (median, overShare float64) {
	if len(xs) == 0 {
		return 1, 0
	}
	over := 0
	for _, x := range xs {
		if x > P99Goal {
			over++
		}
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	median = s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, float64(over) / float64(n)
}

// reversals counts changes of direction of a series, ignoring moves
// under 1 %.
func reversals(xs []float64) int {
	n, dir := 0, 0
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		if math.Abs(d) <= 0.01*max(xs[i-1], 1e-9) {
			continue
		}
		s := 1
		if d < 0 {
			s = -1
		}
		if dir != 0 && s != dir {
			n++
		}
		dir = s
	}
	return n
}
