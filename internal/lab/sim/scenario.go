package sim

import (
	"math"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// Scenario is a script of what happens to the primary. Every function
// takes seconds since the start.
type Scenario struct {
	Name        string
	Description string
	Duration    int // seconds
	// Cores of the primary.
	Cores func(t float64) float64
	// Foreground is the foreground CPU demand, in cores.
	Foreground func(t float64) float64
	// Apply is the replica's apply capacity, bytes per second.
	Apply func(t float64) float64
	// ErrorRate is the share of background batches that fail.
	ErrorRate func(t float64) float64
	// Dropout reports whether the primary's samples are lost at t.
	Dropout func(t float64) bool
	// Held reports whether a person holds every job at t.
	Held func(t float64) bool
	// Jobs and what each wants to do (batches per second).
	Jobs []SimJob
	// SpikeAt is when the disturbance first_cut_s measures from begins,
	// or -1.
	SpikeAt float64
	// NoiseDelay is how many ticks late the samples are.
	Delay int
	// WALPerRow is the WAL one row the jobs clean writes, bytes; 0 means
	// the plant's walPerBatch over rowsPerBatch.
	WALPerRow float64
	// Archive is how many WAL segments a second the archiver ships; nil
	// means archive_mode off (archive_pending_segments reads 0).
	Archive func(t float64) float64
	// LongTx, when set, is a transaction that holds the xmin horizon.
	LongTx *LongTx
	// Rules are the rules adaptive adds to (or replaces among) the
	// controller's defaults; the baselines ignore them.
	Rules map[signals.Name]throttle.Rule
	// Counterpart is the replay scenario (docs/replay) nearest this one,
	// whose fitted latency model gives the foreground's p99 ratio; ""
	// is surge.
	Counterpart string
}

// LongTx is a transaction open from Start to End (seconds): while it is,
// vacuum cannot remove a row deleted after Start.
type LongTx struct {
	Start, End float64
	// Kind and Holder are the labels xmin_horizon_holder names it by.
	Kind, Holder string
}

// open reports whether x holds the horizon at t.
func (x *LongTx) open(t float64) bool { return x != nil && t >= x.Start && t < x.End }

// walPerBatch is the WAL one batch writes, bytes.
func (sc Scenario) walPerBatch() float64 {
	if sc.WALPerRow == 0 {
		return walPerBatch
	}
	return sc.WALPerRow * rowsPerBatch
}

// SimJob is one background job of a scenario.
type SimJob struct {
	Name   status.Job
	Weight float64
	// Demand is the most the job would do at t, batches per second.
	Demand func(t float64) float64
}

func constant(v float64) func(float64) float64 { return func(float64) float64 { return v } }
func never(float64) bool                       { return false }
func between(a, b float64) func(float64) bool {
	return func(t float64) bool { return t >= a && t < b }
}

// ramp goes from a to b between t0 and t1, flat outside.
func ramp(a, b, t0, t1 float64) func(float64) float64 {
	return func(t float64) float64 {
		switch {
		case t <= t0:
			return a
		case t >= t1:
			return b
		}
		return a + (b-a)*(t-t0)/(t1-t0)
	}
}

func oneJob() []SimJob {
	return []SimJob{{Name: "purge", Weight: 1, Demand: constant(maxBudget)}}
}

// The rules of the scenarios that add one to the defaults.
const (
	archiveTarget   = 16.0 // archive_pending_segments: 256 MiB waiting
	archiveCritical = 42.0 // where GitLab's batched migrations stop
	horizonTarget   = 60.0 // xmin_horizon_age_seconds
)

// Scenarios returns every scenario, in a fixed order.
func Scenarios() []Scenario {
	const cores = 8
	base := func(name, desc string, duration int) Scenario {
		return Scenario{
			Name: name, Description: desc, Duration: duration,
			Cores: constant(cores), Foreground: constant(0.4 * cores), Apply: constant(applyNormal),
			ErrorRate: constant(0), Dropout: never, Held: never, Jobs: oneJob(), SpikeAt: -1, Delay: 1,
			Counterpart: defaultCounterpart,
		}
	}
	var out []Scenario

	// Each scenario's Counterpart is the replay scenario nearest it, whose
	// measured p99 ratios its latency model was fitted to (the replay runs
	// each disturbance throughout its block; here it may last a while):
	//   - cores-halved: cpu-hog, the same foreground on less CPU;
	//   - replica-slow: replay-paused, the replica falls behind;
	//   - primary-saturates-lag-zero: 2026-09-13, the incident itself;
	//   - batch-errors: lock-contention, batches meet lock timeouts;
	//   - slow-archiver: write-heavy, the job's WAL is what binds;
	//   - every other one: surge, a busy primary with nothing else wrong.
	//     Their disturbance is the foreground's level (step, ramp,
	//     diurnal, flapping), the signal (stale-signal), the jobs
	//     (weighted-jobs, manual-pause) or the horizon (long-transaction),
	//     none of which the replay measured apart.
	// The replay's conn-storm and quiet are no scenario's counterpart;
	// its idle has no foreground and so no model.
	s := base("steady", "foreground at 40% of 8 cores throughout", 600)
	out = append(out, s)

	s = base("step", "foreground steps from 40% to 90% for two minutes (300-420 s)", 900)
	s.Foreground = func(t float64) float64 {
		if t >= 300 && t < 420 {
			return 0.9 * cores
		}
		return 0.4 * cores
	}
	s.SpikeAt = 300
	out = append(out, s)

	s = base("ramp", "foreground ramps from 20% to 80% over 15 minutes", 900)
	s.Foreground = ramp(0.2*cores, 0.8*cores, 0, 900)
	out = append(out, s)

	s = base("diurnal", "foreground swings 15%-55% on a 20-minute cycle", 2400)
	s.Foreground = func(t float64) float64 { return cores * (0.35 + 0.2*math.Sin(2*math.Pi*t/1200)) }
	out = append(out, s)

	s = base("cores-halved", "failover to a host with half the cores at 300 s (foreground 30% becomes 60%)", 900)
	s.Counterpart = "cpu-hog"
	s.Cores = func(t float64) float64 {
		if t >= 300 {
			return cores / 2
		}
		return cores
	}
	s.Foreground = constant(0.3 * cores)
	s.SpikeAt = 300
	out = append(out, s)

	s = base("replica-slow", "the replica applies WAL at 6 MiB/s instead of 50 between 300 and 600 s", 900)
	s.Counterpart = "replay-paused"
	s.Apply = func(t float64) float64 {
		if t >= 300 && t < 600 {
			return 6 << 20
		}
		return applyNormal
	}
	s.SpikeAt = 300
	out = append(out, s)

	s = base("primary-saturates-lag-zero", "2026-09-13: foreground climbs from 40% to 70% (120-420 s) while a fast replica shows no lag", 900)
	s.Counterpart = "2026-09-13"
	s.Foreground = ramp(0.4*cores, 0.7*cores, 120, 420)
	s.Apply = constant(1 << 30)
	out = append(out, s)

	s = base("stale-signal", "the primary's samples stop arriving between 200 and 260 s", 600)
	s.Dropout = between(200, 260)
	out = append(out, s)

	s = base("flapping", "foreground flaps between 45% and 62% every 15 s, around the point where the target binds", 900)
	s.Foreground = func(t float64) float64 {
		if int(t/15)%2 == 0 {
			return 0.45 * cores
		}
		return 0.62 * cores
	}
	out = append(out, s)

	s = base("weighted-jobs", "three jobs weighted 1:2:1; the third is idle between 300 and 600 s", 900)
	s.Jobs = []SimJob{
		{Name: "archive", Weight: 1, Demand: constant(maxBudget)},
		{Name: "backfill", Weight: 2, Demand: constant(maxBudget)},
		{Name: "purge", Weight: 1, Demand: func(t float64) float64 {
			if t >= 300 && t < 600 {
				return 0
			}
			return maxBudget
		}},
	}
	out = append(out, s)

	s = base("batch-errors", "30% of batches fail (lock timeouts) between 200 and 400 s", 600)
	s.Counterpart = "lock-contention"
	s.ErrorRate = func(t float64) float64 {
		if t >= 200 && t < 400 {
			return 0.3
		}
		return 0
	}
	out = append(out, s)

	s = base("manual-pause", "a person holds every job between 200 and 320 s", 600)
	s.Held = between(200, 320)
	out = append(out, s)

	// The job's deletes write 256 B of WAL a row (the delete records, the
	// full-page images after each checkpoint, the vacuum that follows):
	// 250 KB a batch, so the archiver's 16 MiB/s, less the foreground's
	// 3.2 MiB/s, takes about 52 batches/s, where load alone would allow
	// about 98. The rule's critical level is GitLab's 42 pending
	// segments; a reading moves in steps of one segment.
	s = base("slow-archiver", "the archiver ships one 16 MiB WAL segment a second; the job's WAL (256 B a row) outruns it", 900)
	s.Counterpart = "write-heavy"
	s.WALPerRow = 256
	s.Archive = constant(1)
	s.Rules = map[signals.Name]throttle.Rule{
		signals.ArchivePendingSegments: {Target: archiveTarget, Critical: archiveCritical, Resolution: 1},
	}
	out = append(out, s)

	// A pg_dump's snapshot holds the horizon for six minutes: the rows
	// the job deletes meanwhile stay as dead tuples vacuum cannot remove.
	// The rule has a target only: the age does not answer the rate, so
	// the cuts take the budget to its floor before any critical level
	// would be reached, and a critical pause would then resume at a
	// quarter of that floor.
	s = base("long-transaction", "a pg_dump holds the xmin horizon from 200 to 560 s; rows deleted meanwhile cannot be vacuumed", 900)
	s.LongTx = &LongTx{Start: 200, End: 560, Kind: "session", Holder: "4711:pg_dump"}
	s.Rules = map[signals.Name]throttle.Rule{
		signals.XminHorizonAgeSeconds: {Target: horizonTarget},
	}
	out = append(out, s)
	return out
}

// ScenarioNamed returns the scenario called name.
func ScenarioNamed(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
