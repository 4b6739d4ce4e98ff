package sim

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
)

func run1(t *testing.T, scenario, policy string) Result {
	t.Helper()
	sc, ok := ScenarioNamed(scenario)
	if !ok {
		t.Fatalf("no scenario %q", scenario)
	}
	r, err := Run(sc, policy, 1)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBars asserts the bars the controller must meet. The simulator is
// deterministic, so these are facts about the controller, not timings.
func TestBars(t *testing.T) {
	// 2026-09-13: the primary saturates while lag stays at zero. Pacing on
	// lag alone runs it over critical; ours never goes there, because
	// removing the background load suffices in this scenario.
	adaptive, lagOnly := run1(t, "primary-saturates-lag-zero", "adaptive"), run1(t, "primary-saturates-lag-zero", "lag-only")
	if adaptive.TimeAboveCritical != 0 {
		t.Errorf("primary-saturates-lag-zero: adaptive spent %v s above critical; want 0", adaptive.TimeAboveCritical)
	}
	if lagOnly.TimeAboveCritical < 300 {
		t.Errorf("primary-saturates-lag-zero: lag-only spent only %v s above critical; the scenario does not reproduce the incident", lagOnly.TimeAboveCritical)
	}
	step := run1(t, "step", "adaptive")
	if step.FirstCut == nil || *step.FirstCut > 2*tickSeconds {
		t.Errorf("step: first cut %v; want within 2 ticks", step.FirstCut)
	}
	for _, b := range []struct {
		scenario string
		min      float64
	}{{"steady", 0.8}, {"diurnal", 0.8}, {"step", 0.6}, {"cores-halved", 0.6}} {
		if r := run1(t, b.scenario, "adaptive"); r.Efficiency < b.min {
			t.Errorf("%s: efficiency %.3f; want at least %.2f", b.scenario, r.Efficiency, b.min)
		}
	}
	if r := run1(t, "steady", "adaptive"); r.ReversalsPer10Min > 2 {
		t.Errorf("steady: %.1f reversals per 10 min; want at most 2", r.ReversalsPer10Min)
	}
	for _, s := range []string{"manual-pause", "stale-signal"} {
		if r := run1(t, s, "adaptive"); r.WorkWhilePaused != 0 {
			t.Errorf("%s: %v batches while paused; want 0", s, r.WorkWhilePaused)
		}
	}
}

// TestBarsCanFail checks that the measurements see what the bars forbid:
// a policy that ignores holds and staleness, and one that runs over
// critical.
func TestBarsCanFail(t *testing.T) {
	if r := run1(t, "stale-signal", "fixed"); r.WorkWhilePaused == 0 {
		t.Error("stale-signal: fixed did no work while the signal was stale; work_while_paused measures nothing")
	}
	if r := run1(t, "steady", "binary"); r.ReversalsPer10Min < 10 {
		t.Errorf("steady: binary reverses %.1f times per 10 min; reversals measures nothing", r.ReversalsPer10Min)
	}
	if r := run1(t, "step", "lag-only"); r.FirstCut != nil {
		t.Errorf("step: lag-only cut after %v s though lag never rose", *r.FirstCut)
	}
}

func TestDeterministic(t *testing.T) {
	a, b := run1(t, "diurnal", "adaptive"), run1(t, "diurnal", "adaptive")
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	sc, _ := ScenarioNamed("diurnal")
	c, err := Run(sc, "adaptive", 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Work == a.Work {
		t.Fatal("another seed gave identical work: the noise is not seeded")
	}
}

func TestWeightedJobsShareByWeightAndLendIdleShare(t *testing.T) {
	r := run1(t, "weighted-jobs", "adaptive")
	archive, backfill, purge := r.JobWork["archive"], r.JobWork["backfill"], r.JobWork["purge"]
	if ratio := backfill / archive; math.Abs(ratio-2) > 0.05 {
		t.Errorf("backfill/archive work = %.3f; want 2 (weights 2:1)", ratio)
	}
	// purge is idle a third of the run: about two thirds of archive's
	// work, and its idle share went to the others, not lost.
	if ratio := purge / archive; ratio > 0.75 || ratio < 0.55 {
		t.Errorf("purge/archive = %.3f; want about 2/3", ratio)
	}
	if r.Efficiency < 0.8 {
		t.Errorf("efficiency %.3f with an idle job; its share was not lent", r.Efficiency)
	}
}

func TestOracleAndPlant(t *testing.T) {
	// The load model: monotone, 1 core-share per core at low load, well
	// over 1 past saturation.
	prev := -1.0
	for u := 0.0; u <= 1.5; u += 0.01 {
		l := load(u, 8)
		if l < prev {
			t.Fatalf("load not monotone at u=%.2f", u)
		}
		prev = l
	}
	if l := load(0.3, 8); math.Abs(l-0.3) > 0.01 {
		t.Errorf("load(0.3) = %v; want about 0.3", l)
	}
	if u := utilisationAt(target, 8); math.Abs(load(u, 8)-target) > 1e-6 {
		t.Errorf("utilisationAt(%v) = %v, where load is %v", target, u, load(u, 8))
	}
	if reversals([]float64{1, 2, 3, 2, 1, 2}) != 2 || reversals([]float64{1, 1.001, 1}) != 0 {
		t.Error("reversals miscounts")
	}
}

func TestUnknownPolicy(t *testing.T) {
	sc, _ := ScenarioNamed("steady")
	if _, err := Run(sc, "yolo", 1); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func BenchmarkRunAdaptiveDiurnal(b *testing.B) {
	sc, _ := ScenarioNamed("diurnal")
	for b.Loop() {
		if _, err := Run(sc, "adaptive", 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sc.Duration), "ticks/op")
}

// meanOver is the mean of f over the points of r with from <= T < to.
func meanOver(r Result, from, to float64, f func(Point) float64) float64 {
	var sum, n float64
	for _, p := range r.Series {
		if p.T >= from && p.T < to {
			sum += f(p)
			n++
		}
	}
	return sum / n
}

func rate(p Point) float64    { return p.Rate }
func pending(p Point) float64 { return p.Pending }

// TestSlowArchiverHeldNearTarget: the job's own WAL outruns the archiver.
// The controller's rule on archive_pending_segments keeps the backlog near
// its target, never at its critical level; every baseline, pacing on load
// or lag only, lets it grow for the whole run.
func TestSlowArchiverHeldNearTarget(t *testing.T) {
	sc, _ := ScenarioNamed("slow-archiver")
	if _, ok := sc.Rules["archive_pending_segments"]; !ok {
		t.Fatal("slow-archiver has no rule on archive_pending_segments")
	}
	a := run1(t, "slow-archiver", "adaptive")
	if a.MaxArchivePending >= archiveCritical {
		t.Errorf("adaptive: %v segments pending at most; want under the critical %v throughout", a.MaxArchivePending, archiveCritical)
	}
	// Held near the target, not merely low: a controller that never saw
	// the signal would either let it grow or (unknown, not growing) stay
	// at its initial rate, under what the archiver takes, with nothing
	// pending.
	half := float64(sc.Duration) / 2
	if m := meanOver(a, half, float64(sc.Duration), pending); m < 0.5*archiveTarget || m > 1.25*archiveTarget {
		t.Errorf("adaptive: %.1f segments pending on average over the second half; want near the target %v", m, archiveTarget)
	}
	if a.TimeAboveCritical != 0 {
		t.Errorf("adaptive: %v s over the load's critical", a.TimeAboveCritical)
	}
	if a.Efficiency < 0.85 || a.Efficiency > 1.1 {
		t.Errorf("adaptive: efficiency %.3f; want about what the archiver takes (0.85-1.1)", a.Efficiency)
	}
	for _, p := range []string{"fixed", "lag-only", "binary", "aimd"} {
		r := run1(t, "slow-archiver", p)
		if r.MaxArchivePending <= archiveCritical {
			t.Errorf("%s: only %v segments pending at most; the scenario does not outrun the archiver", p, r.MaxArchivePending)
		}
		mid, last := r.Series[len(r.Series)/2].Pending, r.Series[len(r.Series)-1].Pending
		if last < 1.5*mid {
			t.Errorf("%s: %v segments pending at the end, %v at half time; want a backlog still growing", p, last, mid)
		}
	}
}

// TestLongTransactionSlowsAndResumes: while a long transaction holds the
// xmin horizon past its target age, the controller slows the job almost
// to nothing (what it deletes is bloat), and brings it back once the
// horizon is released. The baselines keep deleting into bloat.
func TestLongTransactionSlowsAndResumes(t *testing.T) {
	sc, _ := ScenarioNamed("long-transaction")
	tx := sc.LongTx
	a := run1(t, "long-transaction", "adaptive")
	before := meanOver(a, tx.Start-100, tx.Start, rate)
	// From 30 s past the target age (the cuts take a few ticks) to the
	// end of the transaction.
	during := meanOver(a, tx.Start+horizonTarget+30, tx.End, rate)
	after := meanOver(a, tx.End+120, float64(sc.Duration), rate)
	if before < 50 {
		t.Fatalf("adaptive ran at %.1f/s before the transaction; the scenario has no work to slow", before)
	}
	if during > 0.05*before {
		t.Errorf("adaptive: %.2f batches/s while the horizon was held, %.1f before; want under 5%%", during, before)
	}
	if after < 0.8*before {
		t.Errorf("adaptive: %.1f batches/s after the horizon was released, %.1f before; want it back to 80%% or more", after, before)
	}
	// The horizon as the plant reads it: growing while held, gone after.
	if h := meanOver(a, tx.End-10, tx.End-9, func(p Point) float64 { return p.Horizon }); math.Abs(h-(tx.End-9-tx.Start)) > 1e-9 {
		t.Errorf("xmin horizon age %v s just before the end; want %v", h, tx.End-9-tx.Start)
	}
	if h := meanOver(a, tx.End, float64(sc.Duration), func(p Point) float64 { return p.Horizon + p.DeadRows }); h != 0 {
		t.Errorf("after the transaction: horizon age and dead rows average %v; want 0", h)
	}
	for _, p := range []string{"fixed", "lag-only", "binary", "aimd"} {
		r := run1(t, "long-transaction", p)
		if r.UnreclaimableDeadRows < 2*a.UnreclaimableDeadRows {
			t.Errorf("%s left %.0f dead rows vacuum could not remove, adaptive %.0f; want at least twice adaptive's", p, r.UnreclaimableDeadRows, a.UnreclaimableDeadRows)
		}
	}
	// The measurement sees a policy that does not slow down.
	aimd := run1(t, "long-transaction", "aimd")
	if d, b := meanOver(aimd, tx.Start+horizonTarget+30, tx.End, rate), meanOver(aimd, tx.Start-100, tx.Start, rate); d < 0.5*b {
		t.Errorf("aimd slowed from %.1f to %.1f/s while the horizon was held though it does not read it", b, d)
	}
}

// TestObserve checks the snapshot the controller sees: the archiver's and
// the horizon's signals, with the holder's labels while it holds.
func TestObserve(t *testing.T) {
	sc, _ := ScenarioNamed("long-transaction")
	now := epoch.Add(time.Minute)
	seen := state{wal: 3 << 20, pending: 7, horizonSecs: 42, horizonXIDs: 1e4, held: true, canary: 1.3}
	snap := signals.Snapshot{At: now, MaxAge: signals.DefaultMaxAge, Samples: observe(sc, seen, &state{wal: 1 << 20}, 0.5, 0.5, 1.2, now)}
	for _, c := range []struct {
		name   signals.Name
		labels map[string]string
		want   float64
	}{
		{signals.WALBytesPerSecond, nil, 2 << 20},
		{signals.ArchivePendingSegments, nil, 7},
		{signals.ArchiveFailing, nil, 0},
		{signals.XminHorizonAgeSeconds, nil, 42},
		{signals.XminHorizonAgeXIDs, nil, 1e4},
		{signals.XminHorizonHolder, map[string]string{signals.LabelHolderKind: "session", signals.LabelHolder: "4711:pg_dump"}, 1e4},
	} {
		s, ok := snap.Get(c.name, c.labels)
		if !ok || s.Err != nil || s.Value != c.want || s.Raw != c.want {
			t.Errorf("%s%v: %+v, %v; want %v", c.name, c.labels, s, ok, c.want)
		}
	}
	// The canary: its smoothed ratio, and the tick's raw one.
	if s, ok := snap.Get(signals.ForegroundLatency, nil); !ok || s.Err != nil || s.Value != 1.2 || s.Raw != 1.3 || s.Unit != signals.UnitRatio {
		t.Errorf("foreground_latency: %+v, %v; want 1.2 smoothed, 1.3 raw, a ratio", s, ok)
	}
	// No window yet: the WAL rate is an error, never 0; nothing held: no
	// holder.
	snap.Samples = observe(sc, state{}, nil, 0.5, 0.5, 1, now)
	if s, ok := snap.Get(signals.WALBytesPerSecond, nil); !ok || s.Err == nil {
		t.Errorf("WAL rate without a window: %+v", s)
	}
	for _, s := range snap.Samples {
		if s.Name == signals.XminHorizonHolder {
			t.Errorf("a holder with nothing held: %+v", s)
		}
	}
}

func TestArchiver(t *testing.T) {
	var a archiver
	// archive_mode off: nothing is ever pending.
	if p := a.step(10*segmentBytes, nil, 0); p != 0 {
		t.Errorf("archive_mode off: %v pending", p)
	}
	a = archiver{}
	slow := constant(0.5)
	var p float64
	for i := range 10 {
		// Two segments a tick, one shipped every other tick.
		p = a.step(2*segmentBytes, slow, float64(i))
	}
	if want := 20 - 5.0; p != want {
		t.Errorf("%v pending after 10 ticks; want %v", p, want)
	}
	// Half a segment: not complete, so not ready.
	a = archiver{}
	if p := a.step(segmentBytes/2, constant(1), 0); p != 0 {
		t.Errorf("a partial segment is pending: %v", p)
	}
	// An idle archiver banks no time: one segment per tick at most after
	// a quiet stretch.
	a = archiver{}
	for i := range 5 {
		a.step(0, constant(1), float64(i))
	}
	if p := a.step(3*segmentBytes, constant(1), 5); p != 2 {
		t.Errorf("%v pending after a burst of 3 on an idle archiver shipping 1/s; want 2", p)
	}
}
