package throttle

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

var c0 = time.Date(2026, 9, 13, 7, 33, 0, 0, time.UTC)

func at(i int) time.Time { return c0.Add(time.Duration(i) * time.Second) }

// world is what the snapshot says at one instant.
type world struct {
	load, raw float64 // primary_load smoothed and raw
	used      float64 // connection_used_fraction
	lag       float64 // replica_lag_seconds of replica1
	age       time.Duration
	loadErr   error
}

func snap(now time.Time, w world) signals.Snapshot {
	if w.raw == 0 {
		w.raw = w.load
	}
	taken := now.Add(-w.age)
	replica := map[string]string{signals.LabelReplica: "replica1"}
	return signals.Snapshot{At: now, MaxAge: 3 * time.Second, Samples: []signals.Sample{
		{Name: signals.PrimaryLoad, Value: w.load, Raw: w.raw, At: taken, Err: w.loadErr},
		{Name: signals.ConnectionUsedFraction, Value: w.used, Raw: w.used, At: taken},
		{Name: signals.ReplicaLagSeconds, Labels: replica, Value: w.lag, Raw: w.lag, At: taken},
	}}
}

// fixture is a controller with one busy job that uses all it is given.
type fixture struct {
	t    *testing.T
	c    *Controller
	tick int
	last Decision
}

func setup(t *testing.T, cfg Config, jobs ...JobConfig) *fixture {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) == 0 {
		jobs = []JobConfig{{Name: "purge"}}
	}
	for _, j := range jobs {
		if err := c.Register(j); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{t: t, c: c}
}

// step reports a tick of full use by every job, each waiting for its
// limiter as a job that uses its whole rate does, then steps once.
func (f *fixture) step(w world) Decision {
	f.t.Helper()
	for j, jd := range f.last.Jobs {
		for range int(math.Round(jd.Rate)) {
			f.c.Report(j, Feedback{Rows: 100, Duration: 50 * time.Millisecond})
		}
		if jd.Rate > 0 {
			f.c.Wanted(j)
		}
	}
	f.tick++
	f.last = f.c.Step(at(f.tick), snap(at(f.tick), w))
	return f.last
}

func (f *fixture) steps(n int, w world) Decision {
	for range n {
		f.step(w)
	}
	return f.last
}

func TestNewValidatesAndNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxBudget: -1}, "MaxBudget must be positive, got -1"},
		{Config{MinBudget: 5, MaxBudget: 2}, "MinBudget 5 must not exceed MaxBudget 2"},
		{Config{Rules: map[signals.Name]Rule{signals.PrimaryLoad: {Target: 1.2, Critical: 1}}}, `Rules["primary_load"]: Target 1.2 must be below Critical 1`},
		{Config{Rules: map[signals.Name]Rule{signals.ConnectionHeadroom: {Target: 0.05, Critical: 0.1}}}, `Rules["connection_headroom"]: Critical 0.1 must be below Target 0.05`},
		{Config{Rules: map[signals.Name]Rule{"replica_lag": {Target: 1}}}, `Rules["replica_lag"]: unknown signal`},
		{Config{Rules: map[signals.Name]Rule{signals.ReplicaLagSeconds: {Target: -2}}}, `Rules["replica_lag_seconds"].Target must be positive, got -2`},
		{Config{Replicas: map[string]ReplicaPolicy{"r1": "sometimes"}}, `Replicas["r1"]: policy "sometimes"`},
		{Config{GrowBelow: 1.2}, "GrowBelow is a fraction and must be under 1, got 1.2"},
		{Config{MaxGrowth: 0.9}, "MaxGrowth 0.9 and ProbeGrowth 1.02 must be above 1"},
		{Config{CriticalWindow: -1}, "CriticalWindow must be at least 1, got -1"},
		{Config{Tick: -time.Second}, "Tick must be positive, got -1s"},
		{Config{EmergencyPressure: 1.5}, `EmergencyPressure 1.5 must be below Rules["primary_load"]'s critical pressure 1.43`},
		{Config{MaxBudget: math.NaN()}, "MaxBudget must be positive, got NaN"},
		{Config{Rules: map[signals.Name]Rule{signals.ForegroundLatency: {Target: 0.9}}}, `Rules["foreground_latency"].Target is a multiple of the latency without jobs and must be above 1, such as 1.3; got 0.9`},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	c, err := New(Config{})
	if err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for _, j := range []struct {
		cfg  JobConfig
		want string
	}{
		{JobConfig{Name: "Bad Name"}, `invalid job name "Bad Name"`},
		{JobConfig{Name: "a", Weight: -1}, `job "a": Weight must be a number not below 0, got -1`},
		{JobConfig{Name: "a", MinRate: 5, MaxRate: 1}, "MinRate 5 must not exceed MaxRate 1"},
	} {
		if err := c.Register(j.cfg); err == nil || !strings.Contains(err.Error(), j.want) {
			t.Errorf("Register(%+v) = %v; want %q", j.cfg, err, j.want)
		}
	}
}

func TestCutsWithinTwoTicksAndHoldsInTheDeadband(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 50})
	d := f.steps(3, world{load: 0.5, used: 0.3})
	before := d.Budget
	// Smoothed load climbs over target (0.77 > 0.7): cut at the first
	// tick, bounded.
	d = f.step(world{load: 0.77, used: 0.3})
	if d.Budget >= before || d.Budget < before*0.5 {
		t.Fatalf("over target: budget %v -> %v; want a cut of at most half", before, d.Budget)
	}
	if d.Mode != status.ModeThrottled || d.Binding.String() != "primary_load" || !strings.Contains(d.Reason, "cut by") {
		t.Fatalf("decision %+v", d)
	}
	// Deadband (0.95-1.0 of target): hold, however long.
	held := f.step(world{load: 0.68, used: 0.3}).Budget
	for range 20 {
		if d := f.step(world{load: 0.68, used: 0.3}); d.Budget != held || d.Mode != status.ModeThrottled {
			t.Fatalf("in the deadband the budget moved %v -> %v (%s)", held, d.Budget, d.Reason)
		}
	}
	// One raw sample at the emergency level (1.3x target) is one reading:
	// at most an ordinary cut. Two in a row cut 75 % at once.
	d = f.step(world{load: 0.68, raw: 0.95, used: 0.3})
	if d.Budget < held*0.5-1e-9 || strings.Contains(d.Reason, "emergency") {
		t.Fatalf("one sample at 1.36x target: %v -> %v (%s); want at most an ordinary cut", held, d.Budget, d.Reason)
	}
	held = d.Budget
	d = f.step(world{load: 0.68, raw: 0.95, used: 0.3})
	if math.Abs(d.Budget-held*0.25) > 1e-9 || !strings.Contains(d.Reason, "emergency") {
		t.Fatalf("emergency: %v -> %v (%s)", held, d.Budget, d.Reason)
	}
}

// From the start, far under target, the budget doubles every two ticks
// toward MaxBudget (slow start, as TCP's): a cleanup on a quiet primary
// reaches its max_rate within 10 s. A new job at a tenth of it doubles
// four times.
func TestSlowStartFromTheStartReachesMaxBudgetWithinTenSeconds(t *testing.T) {
	f := setup(t, Config{MaxBudget: 4, InitialBudget: 0.4})
	for f.last.Budget < 4 && f.tick < 30 {
		d := f.step(world{load: 0.2, used: 0.3})
		// At the first tick nothing has run yet to show use.
		if f.tick > 1 && d.Code != status.CodeSlowStart && d.Code != status.CodeMaxRate {
			t.Fatalf("tick %d: %s (%s); want slow start", f.tick, d.Code, d.Reason)
		}
	}
	if took := time.Duration(f.tick) * time.Second; took > 10*time.Second {
		t.Fatalf("reached %v of MaxBudget 4 after %s; want within 10 s", f.last.Budget, took)
	}
	// A cut ends it: growth after it is the breach's, not slow start's.
	f.steps(2, world{load: 0.8, used: 0.3})
	for range 10 {
		if d := f.step(world{load: 0.2, used: 0.3}); d.Code == status.CodeSlowStart {
			t.Fatalf("slow start after a cut with no pause: %s", d.Reason)
		}
	}
}

func TestGrowsSlowlyOnlyWhenUsedAndNeverStraightPastTheBreach(t *testing.T) {
	// Near the target (0.45/0.7 = 0.64 of it, over half of GrowBelow)
	// growth is at most 25 % every 3 ticks.
	f := setup(t, Config{MaxBudget: 1000, InitialBudget: 10})
	prev, changes, lastChange := 10.0, 0, 0
	for i := 1; i <= 30; i++ {
		d := f.step(world{load: 0.45, used: 0.3})
		if d.Budget > prev {
			if d.Budget > prev*1.25+1e-9 {
				t.Fatalf("tick %d: grew %v -> %v, more than 25%%", i, prev, d.Budget)
			}
			if changes > 0 && i-lastChange < 3 {
				t.Fatalf("tick %d: grew again %d ticks after the last change", i, i-lastChange)
			}
			changes, lastChange = changes+1, i
		}
		prev = d.Budget
	}
	if changes < 8 {
		t.Fatalf("only %d growth steps in 30 ticks at low pressure", changes)
	}
	// A breach at this budget, then calm: growth returns quickly to 90 %
	// of it, then only probes, 2 % a step.
	breach := prev
	prev = f.step(world{load: 0.8, used: 0.3}).Budget
	probes := 0
	for range 60 {
		d := f.step(world{load: 0.3, used: 0.3})
		if d.Budget > prev && prev >= 0.9*breach {
			probes++
			if d.Budget > prev*1.02+1e-9 {
				t.Fatalf("grew %v -> %v near the breach at %v; want probes of at most 2%%", prev, d.Budget, breach)
			}
		}
		if d.Budget > 0.9*breach+1e-9 && prev < 0.9*breach-1e-9 {
			t.Fatalf("grew %v -> %v, past 90%% of the breach at %v in one step", prev, d.Budget, breach)
		}
		prev = d.Budget
	}
	if probes == 0 {
		t.Fatal("never probed past 90% of the breach budget")
	}
	// Jobs that use nothing prove nothing: no growth.
	g := setup(t, Config{MaxBudget: 1000, InitialBudget: 10})
	for range 10 {
		g.tick++
		d := g.c.Step(at(g.tick), snap(at(g.tick), world{load: 0.2, used: 0.3}))
		if d.Budget != 10 {
			t.Fatalf("grew to %v with no job using its allocation", d.Budget)
		}
		if g.tick > 4 && !strings.Contains(d.Reason, "not growing: jobs use 0% of the budget") {
			t.Fatalf("reason %q", d.Reason)
		}
	}
}

func TestStaleRequiredSignalStopsWorkAndMissedTickFreezesGrowth(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	before := f.steps(3, world{load: 0.3, used: 0.3}).Budget
	d := f.step(world{load: 0.3, used: 0.3, age: 4 * time.Second})
	if d.Mode != status.ModeStale || d.Budget != 0 || d.Binding.String() != "primary_load" {
		t.Fatalf("stale: %+v", d)
	}
	if !strings.HasPrefix(d.Reason, "stale: primary_load (age 4s over max_age 3s)") {
		t.Fatalf("reason %q", d.Reason)
	}
	if len(d.Events) != 1 || d.Events[0].Kind != status.EventStale {
		t.Fatalf("events %+v", d.Events)
	}
	for j, jd := range d.Jobs {
		if jd.Rate != 0 || jd.State != status.JobPaused {
			t.Fatalf("job %s while stale: %+v", j, jd)
		}
	}
	d = f.step(world{load: 0.3, used: 0.3, loadErr: errors.New("signals: timed out")})
	if d.Mode != status.ModeStale || !strings.Contains(d.Reason, "error: signals: timed out") {
		t.Fatalf("unreadable: %+v", d)
	}
	// Fresh again: slow start at a quarter of the budget before.
	d = f.step(world{load: 0.3, used: 0.3})
	if d.Mode == status.ModeStale || math.Abs(d.Budget-before*0.25) > 1e-9 {
		t.Fatalf("after stale: %v (%s); want a quarter of %v", d.Budget, d.Reason, before)
	}
	// A tick with no new sample (same At as before) freezes growth.
	f.steps(10, world{load: 0.2, used: 0.3})
	before = f.last.Budget
	f.tick++
	now := at(f.tick)
	same := snap(at(f.tick-1), world{load: 0.2, used: 0.3})
	same.At = now
	for range 5 {
		f.last = f.c.Step(now, same)
		if f.last.Budget > before {
			t.Fatalf("grew %v -> %v without a new sample", before, f.last.Budget)
		}
		f.tick++
		now = at(f.tick)
		same.At = now
	}
	// An optional replica's lag unknown also stops growth, not work.
	cfg := Config{MaxBudget: 100, InitialBudget: 40, Replicas: map[string]ReplicaPolicy{"replica1": ReplicaOptional}}
	g := setup(t, cfg)
	for range 10 {
		s := snap(at(g.tick+1), world{load: 0.2, used: 0.3})
		s.Samples[2].Err = errors.New("missing")
		g.tick++
		g.last = g.c.Step(at(g.tick), s)
		if g.last.Budget != 40 || g.last.Mode != status.ModeRunning || !strings.Contains(g.last.Reason, "not growing") {
			t.Fatalf("optional replica unknown: %v %s %q", g.last.Budget, g.last.Mode, g.last.Reason)
		}
	}
	// Required, it stops work.
	cfg.Replicas["replica1"] = ReplicaRequired
	h := setup(t, cfg)
	s := snap(at(1), world{load: 0.2, used: 0.3})
	s.Samples = s.Samples[:2] // replica1 not sampled at all
	if d := h.c.Step(at(1), s); d.Mode != status.ModeStale || !strings.Contains(d.Reason, `replica_lag_seconds{replica="replica1"} (not sampled)`) {
		t.Fatalf("required replica absent: %s %q", d.Mode, d.Reason)
	}
}

func TestCriticalPausesPagesAndResumesSlowly(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 60}, JobConfig{Name: "purge"}, JobConfig{Name: "archive"})
	f.steps(3, world{load: 0.6, used: 0.3})
	before := f.last.Budget
	var page *status.Event
	for i := 1; i <= 3; i++ {
		d := f.step(world{load: 0.9, raw: 1.05, used: 0.3})
		for _, e := range d.Events {
			if e.Page() {
				page = &e
			}
		}
		if (i < 3) != (d.Mode != status.ModeCritical) {
			t.Fatalf("sample %d at critical: mode %s", i, d.Mode)
		}
	}
	d := f.last
	if page == nil || page.Kind != status.EventCritical || page.Signal != "primary_load" || page.Value != 1.05 || page.Threshold != 1 {
		t.Fatalf("page %+v", page)
	}
	if len(page.Jobs) != 2 || page.Jobs[0].Rate <= 0 {
		t.Fatalf("page names the jobs that ran: %+v", page.Jobs)
	}
	if d.Budget != 0 || d.Jobs["purge"].Rate != 0 || !strings.HasPrefix(d.Reason, "critical: primary_load reached 1.05") {
		t.Fatalf("critical decision %+v", d)
	}
	// Under critical but over the resume level (0.5): stays paused.
	if d := f.steps(60, world{load: 0.6, used: 0.3}); d.Mode != status.ModeCritical {
		t.Fatalf("resumed at 0.6, over the resume level: %s", d.Reason)
	}
	// Under the resume level: 30 s of quiet, then slow start.
	for i := 1; i <= 30; i++ {
		if d := f.step(world{load: 0.3, used: 0.3}); d.Mode != status.ModeCritical {
			t.Fatalf("resumed after %d s of quiet; want 30", i)
		}
	}
	d = f.step(world{load: 0.3, used: 0.3})
	if d.Mode == status.ModeCritical || d.Budget > before*0.25+1e-9 || d.Budget == 0 {
		t.Fatalf("after the quiet period: %s budget %v; want a quarter of %v", d.Mode, d.Budget, before)
	}
	if len(d.Events) != 1 || d.Events[0].Kind != status.EventRecovered {
		t.Fatalf("events %+v", d.Events)
	}
}

func TestThirdCriticalInAnHourLatchesUntilAPersonResumes(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 60})
	quiet := func() int {
		n := 0
		for f.step(world{load: 0.2, used: 0.3}).Mode == status.ModeCritical {
			n++
			if n > 1000 {
				t.Fatal("never resumed")
			}
		}
		return n
	}
	for episode, wantQuiet := range []int{30, 60} {
		f.steps(3, world{load: 0.5, raw: 1.2, used: 0.3})
		if got := quiet(); got != wantQuiet {
			t.Fatalf("critical pause %d lasted %d quiet ticks; want %d", episode+1, got, wantQuiet+1)
		}
	}
	d := f.steps(3, world{load: 0.5, raw: 1.2, used: 0.3})
	if !d.Latched || !strings.Contains(d.Reason, "latched after 3 critical pauses") {
		t.Fatalf("third critical pause: %+v", d)
	}
	if d := f.steps(600, world{load: 0.1, used: 0.3}); d.Mode != status.ModeCritical || !d.Latched {
		t.Fatalf("latch ended without a person: %s", d.Reason)
	}
	if f.c.Resume(at(f.tick), "") != true {
		t.Fatal("Resume found no latch")
	}
	d = f.step(world{load: 0.1, used: 0.3})
	if d.Mode == status.ModeCritical || d.Budget == 0 {
		t.Fatalf("after Resume: %+v", d)
	}
	kinds := map[status.EventKind]bool{}
	for _, e := range d.Events {
		kinds[e.Kind] = true
	}
	if !kinds[status.EventResumed] || !kinds[status.EventRecovered] {
		t.Fatalf("events after Resume: %+v", d.Events)
	}
	if f.c.Resume(at(f.tick), "alice") {
		t.Fatal("Resume without a latch reported one")
	}
}

// fakeHolds holds the jobs in the set.
type fakeHolds map[status.Job]bool

func (h fakeHolds) Applying(now time.Time, job string) []hold.Hold {
	if h[status.Job(job)] || (job == "" && h["*"]) {
		return []hold.Hold{{ID: "h1", Scope: hold.OneJob(job), Source: hold.SourceManual, Reason: "investigating", Actor: "alice", Created: c0, Expires: c0.Add(time.Hour)}}
	}
	return nil
}

func TestHoldsPauseJobsAndReleaseSlowly(t *testing.T) {
	holds := fakeHolds{}
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40, Holds: holds}, JobConfig{Name: "purge"}, JobConfig{Name: "archive"})
	f.steps(3, world{load: 0.5, used: 0.3})
	purgeBefore := f.last.Jobs["purge"].Rate
	holds["purge"] = true
	d := f.step(world{load: 0.5, used: 0.3})
	if jd := d.Jobs["purge"]; jd.Rate != 0 || jd.State != status.JobPaused || len(jd.Holds) != 1 || !strings.Contains(jd.Reason, "by alice") {
		t.Fatalf("held job: %+v", jd)
	}
	if d.Mode == status.ModePaused || d.Jobs["archive"].Rate <= purgeBefore {
		t.Fatalf("one job held: mode %s, archive %v; want the budget lent to archive", d.Mode, d.Jobs["archive"].Rate)
	}
	holds["archive"] = true
	if d := f.step(world{load: 0.5, used: 0.3}); d.Mode != status.ModePaused || d.Budget != 0 || !strings.HasPrefix(d.Reason, "paused: hold h1") {
		t.Fatalf("every job held: %+v", d)
	}
	delete(holds, "purge")
	delete(holds, "archive")
	d = f.step(world{load: 0.5, used: 0.3})
	if d.Mode == status.ModePaused || d.Jobs["purge"].Rate > purgeBefore*0.25+1e-9 {
		t.Fatalf("after release purge runs at %v; want at most a quarter of %v", d.Jobs["purge"].Rate, purgeBefore)
	}
}

func TestBatchErrorsCutTheBudget(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 40})
	f.steps(3, world{load: 0.3, used: 0.3})
	before := f.last.Budget
	for range 30 {
		f.c.Report("purge", Feedback{Duration: time.Millisecond, Err: errors.New("deadlock")})
	}
	d := f.step(world{load: 0.3, used: 0.3})
	if d.Budget >= before || d.Binding.String() != "job_error_fraction" || !strings.Contains(d.Reason, "batches failed") {
		t.Fatalf("errors: %v -> %v, %s %q", before, d.Budget, d.Binding, d.Reason)
	}
	// Errors that persist do not cut below a quarter of where they began.
	for range 30 {
		for range 30 {
			f.c.Report("purge", Feedback{Err: errors.New("deadlock")})
		}
		d = f.step(world{load: 0.3, used: 0.3})
	}
	if d.Budget < before*0.25-1e-9 {
		t.Fatalf("persistent errors cut to %v; floor is a quarter of %v", d.Budget, before)
	}
}

// TestProperties checks invariants over random snapshots, holds and
// reports.
func TestProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for run := range 200 {
		holds := fakeHolds{}
		cfg := Config{MaxBudget: 50 + rng.Float64()*500, Holds: holds,
			Replicas: map[string]ReplicaPolicy{"replica1": []ReplicaPolicy{ReplicaRequired, ReplicaOptional, ReplicaIgnored}[rng.IntN(3)]}}
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg = c.Config()
		jobs := []status.Job{"a", "b", "c"}
		for _, j := range jobs {
			if err := c.Register(JobConfig{Name: j, Weight: 1 + rng.Float64()*3}); err != nil {
				t.Fatal(err)
			}
		}
		prev := Decision{}
		for i := 1; i <= 200; i++ {
			now := at(i)
			w := world{load: rng.Float64() * 1.5, raw: rng.Float64() * 1.5, used: rng.Float64(), lag: rng.Float64() * 4}
			if rng.IntN(10) == 0 {
				w.age = time.Duration(rng.IntN(6)) * time.Second
			}
			if rng.IntN(20) == 0 {
				w.loadErr = errors.New("timeout")
			}
			for _, j := range jobs {
				holds[j] = rng.IntN(8) == 0
				for range rng.IntN(int(prev.Jobs[j].Rate) + 2) {
					var err error
					if rng.IntN(15) == 0 {
						err = errors.New("x")
					}
					c.Report(j, Feedback{Duration: time.Duration(rng.IntN(100)) * time.Millisecond, Err: err})
				}
			}
			s := snap(now, w)
			d := c.Step(now, s)
			stale := w.age > 3*time.Second || w.loadErr != nil
			if d.Budget < 0 || d.Budget > cfg.MaxBudget || (d.Budget > 0 && d.Budget < cfg.MinBudget) {
				t.Fatalf("run %d tick %d: budget %v outside [%v, %v]", run, i, d.Budget, cfg.MinBudget, cfg.MaxBudget)
			}
			if stale && d.Budget != 0 {
				t.Fatalf("run %d tick %d: budget %v with a stale required signal (%s)", run, i, d.Budget, d.Reason)
			}
			if stale && prev.Budget > 0 && d.Budget > prev.Budget {
				t.Fatalf("run %d tick %d: grew while stale", run, i)
			}
			if (d.Mode != status.ModeRunning && d.Mode != status.ModeThrottled) && d.Budget != 0 {
				t.Fatalf("run %d tick %d: mode %s with budget %v", run, i, d.Mode, d.Budget)
			}
			var sum float64
			all := true
			for _, j := range jobs {
				jd := d.Jobs[j]
				if holds[j] && (jd.Rate != 0 || jd.State != status.JobPaused) {
					t.Fatalf("run %d tick %d: held job %s at rate %v state %s", run, i, j, jd.Rate, jd.State)
				}
				if jd.Rate < 0 || (jd.Rate > 0 && (jd.Burst < 1 || jd.MaxInFlight < 1)) {
					t.Fatalf("run %d tick %d: job %s allocation %+v", run, i, j, jd.Allocation)
				}
				// Every code fits its state, so a worker reading it back
				// (CodeFor) keeps it; and a code that says go has a rate
				// unless it is too slow.
				if jd.Code == "" || status.CodeFor(jd.State, jd.Code) != jd.Code {
					t.Fatalf("run %d tick %d: job %s state %s with code %q (%s)", run, i, j, jd.State, jd.Code, jd.Reason)
				}
				if !jd.Code.Go() && jd.Rate != 0 {
					t.Fatalf("run %d tick %d: job %s code %s at rate %v", run, i, j, jd.Code, jd.Rate)
				}
				all = all && holds[j]
				sum += jd.Rate
			}
			if all && d.Mode == status.ModeRunning {
				t.Fatalf("run %d tick %d: running while every job is held", run, i)
			}
			if sum > d.Budget*(1+1e-9)+1e-9 {
				t.Fatalf("run %d tick %d: jobs get %v of a budget of %v", run, i, sum, d.Budget)
			}
			prev = d
		}
	}
}

// A controller taking over a latched critical pause (a leader failover)
// stays in it: no work however calm the primary, until a person resumes,
// then a slow start from the budget before the pause, never the old
// rate. Reconfigure keeps the same pause.
func TestInheritedLatchHoldsUntilAPersonResumes(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 60, QuietPeriod: 5 * time.Second,
		Inherited: &CriticalState{Signal: status.Binding{Signal: signals.PrimaryLoad}, Since: c0, Latched: true, Budget: 80}})
	if d := f.steps(30, world{load: 0.1, used: 0.3}); d.Mode != status.ModeCritical || !d.Latched || d.Budget != 0 {
		t.Fatalf("inherited latch: %s %v budget %v", d.Mode, d.Latched, d.Budget)
	}
	cfg := f.c.Config()
	cfg.MaxBudget = 90
	if err := f.c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if d := f.steps(10, world{load: 0.1, used: 0.3}); d.Mode != status.ModeCritical || !d.Latched {
		t.Fatalf("after Reconfigure: %s latched %v", d.Mode, d.Latched)
	}
	if st := f.c.Critical(); st == nil || !st.Latched || !st.Signal.Equal(status.Binding{Signal: signals.PrimaryLoad}) || st.Budget != 80 {
		t.Fatalf("Critical() = %+v", st)
	}
	if !f.c.Resume(at(f.tick), "alice") {
		t.Fatal("Resume found no latch")
	}
	n := 0
	for f.step(world{load: 0.1, used: 0.3}).Mode == status.ModeCritical {
		if n++; n > 100 {
			t.Fatal("never resumed")
		}
	}
	// A person's resume ends the pause once the signals are calm (they
	// have been), at a slow start from the budget before the pause.
	if n > 1 || f.last.Budget <= 0 || f.last.Budget >= 80 {
		t.Fatalf("resumed after %d more ticks at budget %v; want at once, at a slow start under 80", n, f.last.Budget)
	}
	if err := f.c.Reconfigure(Config{MaxBudget: -1}); err == nil {
		t.Fatal("Reconfigure accepted a bad configuration")
	}
	if f.c.Config().MaxBudget != 90 {
		t.Fatal("a refused Reconfigure changed the configuration")
	}
}
