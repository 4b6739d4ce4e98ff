package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// step.go: the controller's step response on the real pair. The
// interleaved instrument compares a policy's window with its alone
// neighbours; a closed-loop policy needs windows long enough to act in,
// or the operating point read is the window's, not the product's. This
// measures how long adaptive takes to act: its job works throughout while
// the scenario's disturbance comes and goes, and the trace shows, for each
// onset, the time to the budget's first cut, and for each relief, the time
// until the budget is back to 80 % of what it was at the onset.

// StepConfig configures RunStep. The zero value of every field but
// Cluster, Scenario and Rate means its default.
type StepConfig struct {
	// Block carries the cluster, cores, rate, table and job settings, as
	// for RunBlock; its Scenario names the disturbance (its events) and
	// the foreground (its rate factor and mix).
	Block BlockConfig
	// Settle is the disturbance off before the first onset. Default 30s.
	Settle time.Duration
	// On is how long each disturbance lasts. Default 20s.
	On time.Duration
	// Off is the relief after each: the longest a recovery is timed.
	// Default 40s.
	Off time.Duration
	// Reps is the onsets. Default 3.
	Reps int
}

// StepSample is one reading of the trace.
type StepSample struct {
	// T is seconds from the first onset's settle start.
	T float64 `json:"t"`
	// On is whether the disturbance was on.
	On bool `json:"on"`
	// Rate is the job's budget, batches per second; Batch its batch
	// size, keys.
	Rate  float64 `json:"rate"`
	Batch int     `json:"batch"`
	// Rows is the rows cleaned so far.
	Rows int64 `json:"rows"`
}

// StepRep is one onset and its relief.
type StepRep struct {
	// Onset and Relief are seconds into the trace.
	Onset, Relief float64
	// Before is the budget (batches per second) just before the onset.
	Before float64
	// Cut is the seconds from the onset to the first sample whose budget
	// is under the one before it; -1 where none came before the relief.
	Cut float64
	// Trough is the lowest budget between the onset and the relief.
	Trough float64
	// Recover is the seconds from the relief until the budget is at 80 %
	// of Before again; -1 where it was not by the next onset (or the
	// trace's end); 0 where it never fell under.
	Recover float64
}

// StepRun is one step-response run.
type StepRun struct {
	Scenario string        `json:"scenario"`
	Rate     float64       `json:"rate"`
	Settle   time.Duration `json:"settle"`
	On       time.Duration `json:"on"`
	Off      time.Duration `json:"off"`
	Reps     int           `json:"reps"`
	Started  time.Time     `json:"started"`
	Took     time.Duration `json:"took"`
	Samples  []StepSample  `json:"samples"`
}

// stepSampleEvery is the trace's resolution.
const stepSampleEvery = 100 * time.Millisecond

// recoverShare is the share of the onset's budget a recovery is timed to.
const recoverShare = 0.8

func (c *StepConfig) fill() {
	c.Settle = cmp.Or(c.Settle, 30*time.Second)
	c.On = cmp.Or(c.On, 20*time.Second)
	c.Off = cmp.Or(c.Off, 40*time.Second)
	c.Reps = cmp.Or(c.Reps, 3)
}

// RunStep runs adaptive's job throughout on be while cfg's scenario's
// disturbance comes and goes, and returns the trace.
func RunStep(ctx context.Context, be *BlockEnv, cfg StepConfig) (*StepRun, error) {
	cfg.fill()
	bc := cfg.Block
	bc.Policies = []string{PolicyAdaptive}
	bc.fill()
	if err := bc.validate(); err != nil {
		return nil, err
	}
	sc, _ := scenarioByName(bc.Scenario)
	if sc.NoForeground {
		return nil, fmt.Errorf("replay: step: scenario %q has no foreground to step", sc.Name)
	}
	if len(sc.Events) == 0 {
		// A scenario whose disturbance is its foreground's kind
		// (write-heavy, quiet) is stepped by its own foreground doubled.
		sc.Events = []Event{{Name: "its foreground x2", start: surgeBy(2)}}
	}
	began := time.Now()
	var rows atomic.Int64
	bj, err := newBlockJob(ctx, bc, Window{Policy: PolicyAdaptive}, &rows, &be.upTo)
	if err != nil {
		return nil, fmt.Errorf("replay: step: %w", err)
	}
	defer bj.stop()
	gen := newGenerator(be.fg, be.scale, cmp.Or(sc.ReadOnly, bc.ReadOnly), bc.Workers)
	gen.small = sc.SmallWrites
	fgRate := bc.Rate * cmp.Or(sc.RateFactor, 1)
	total := cfg.Settle + time.Duration(cfg.Reps)*(cfg.On+cfg.Off)
	start := time.Now().Add(500 * time.Millisecond).Truncate(100 * time.Millisecond)
	end := start.Add(total)
	gctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	defer wg.Wait()
	rec := newRecorder(start)
	wg.Go(func() { gen.run(gctx, fgRate, start, total, bc.Seed, rec) })
	bj.gate.set(true)
	// ranOut is when the job cleaned every old row before the trace's
	// end: a budget of 0 after it is no controller's, and the trace is
	// refused rather than read.
	var ranOut atomic.Pointer[time.Time]
	wg.Go(func() {
		err := bj.job.Run(gctx)
		if err != nil && !errors.Is(err, context.Canceled) {
			bc.Log("step: job: %v", err)
		}
		if err == nil && gctx.Err() == nil {
			now := time.Now()
			ranOut.Store(&now)
		}
	})
	var mu sync.Mutex
	on := false
	var samples []StepSample
	wg.Go(func() {
		t := time.NewTicker(stepSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return
			case now := <-t.C:
				if now.After(end) {
					return
				}
				st := bj.job.Status()
				mu.Lock()
				samples = append(samples, StepSample{T: now.Sub(start).Seconds(), On: on, Rate: st.Rate, Batch: st.BatchSize, Rows: rows.Load()})
				mu.Unlock()
			}
		}
	})
	e := &env{c: bc.Cluster, gen: gen, admin: be.admin, cores: bc.Cores}
	bc.Log("step %s: foreground %.0f tx/s; settle %s, then %d times the disturbance on %s and off %s", sc.Name, fgRate, cfg.Settle, cfg.Reps, cfg.On, cfg.Off)
	at := start.Add(cfg.Settle)
	for r := range cfg.Reps {
		if !sleepUntil(ctx, at) {
			return nil, ctx.Err()
		}
		var stops []func() error
		for _, ev := range sc.Events {
			stop, err := ev.start(gctx, e, cfg.On)
			if err != nil {
				for _, s := range stops {
					_ = s()
				}
				return nil, fmt.Errorf("replay: step: event %q: %w", ev.Name, err)
			}
			stops = append(stops, stop)
		}
		mu.Lock()
		on = true
		mu.Unlock()
		bc.Log("step %s: onset %d", sc.Name, r+1)
		if !sleepUntil(ctx, at.Add(cfg.On)) {
			return nil, ctx.Err()
		}
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		mu.Lock()
		on = false
		mu.Unlock()
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("replay: step: ending the disturbance: %w", err)
		}
		at = at.Add(cfg.On + cfg.Off)
	}
	if !sleepUntil(ctx, end) {
		return nil, ctx.Err()
	}
	bj.gate.set(false)
	stopAll()
	wg.Wait()
	if t := ranOut.Load(); t != nil {
		return nil, fmt.Errorf("replay: step: the job cleaned every old row %s into the trace's %s: give the table more rows", t.Sub(start).Round(time.Second), total)
	}
	mu.Lock()
	defer mu.Unlock()
	return &StepRun{Scenario: sc.Name, Rate: fgRate, Settle: cfg.Settle, On: cfg.On, Off: cfg.Off, Reps: cfg.Reps,
		Started: began, Took: time.Since(began).Round(time.Second), Samples: samples}, nil
}

// Analyse reads each onset and relief off the trace.
func (s *StepRun) Analyse() []StepRep {
	var reps []StepRep
	n := len(s.Samples)
	for i := 1; i < n; i++ {
		if !s.Samples[i].On || s.Samples[i-1].On {
			continue
		}
		r := StepRep{Onset: s.Samples[i].T, Before: s.Samples[i-1].Rate, Cut: -1, Recover: -1, Trough: math.Inf(1)}
		j := i
		for ; j < n && s.Samples[j].On; j++ {
			if r.Cut < 0 && s.Samples[j].Rate < s.Samples[j-1].Rate {
				r.Cut = s.Samples[j].T - r.Onset
			}
			r.Trough = min(r.Trough, s.Samples[j].Rate)
		}
		if j >= n {
			reps = append(reps, r)
			break
		}
		r.Relief = s.Samples[j].T
		if r.Trough >= recoverShare*r.Before {
			r.Recover = 0
		}
		for k := j; k < n && !s.Samples[k].On && r.Recover < 0; k++ {
			if s.Samples[k].Rate >= recoverShare*r.Before {
				r.Recover = s.Samples[k].T - r.Relief
			}
		}
		reps = append(reps, r)
		i = j
	}
	return reps
}

// StepFile is where a scenario's step run is kept in dir.
func StepFile(dir, scenario string) string { return filepath.Join(dir, "step-"+scenario+".json") }

// WriteStep stores s in dir.
func WriteStep(dir string, s *StepRun) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(StepFile(dir, s.Scenario), append(b, '\n'), 0o644)
}

// ReadSteps reads every step run in dir, by scenario.
func ReadSteps(dir string) ([]*StepRun, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "step-*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out []*StepRun
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var s StepRun
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, &s)
	}
	return out, nil
}

// StepLongest is the longest cut delay or recovery over runs' paced reps,
// in seconds, and whether it is known. A rep with no cut (nothing to act
// on) or whose budget fell to 0 (a pause: a critical level, or a stale
// signal, which ends only after its quiet period, by design) is not a
// pacing step and does not count; a paced rep not recovered within its
// relief makes the bound unknown.
func StepLongest(runs []*StepRun) (float64, bool) {
	longest, known, paced := 0.0, true, 0
	for _, s := range runs {
		for _, r := range s.Analyse() {
			if r.Cut < 0 || r.Trough <= 0 {
				continue
			}
			paced++
			if r.Recover < 0 {
				known = false
				continue
			}
			longest = max(longest, r.Cut, r.Recover)
		}
	}
	return longest, known && paced > 0
}

// stepKind says what a rep was: paced (a cut and a recovery), no cut, or
// a pause.
func stepKind(r StepRep) string {
	switch {
	case r.Cut < 0:
		return "no cut"
	case r.Trough <= 0:
		return "paused"
	}
	return "paced"
}

// StepSection renders the step runs as the table in docs/BENCHMARKS.md.
func StepSection(runs []*StepRun, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated by `%s`; never edited by hand. Adaptive's job works throughout on the throwaway pair, beside the scenario's foreground, while the scenario's disturbance comes and goes; its budget (batches a second) is read every %s. **Cut** is from an onset to the first reading under the one before it; **recover** from the relief to the first reading at %.0f %% of the budget at the onset again (0 where it never fell under; – where it did not within the relief).\n\n", command, stepSampleEvery, recoverShare*100)
	b.WriteString("| scenario | run | rep | budget before /s | cut s | trough /s | recover s | what |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, s := range runs {
		for i, r := range s.Analyse() {
			fmt.Fprintf(&b, "| %s | %s, %.0f tx/s, on %s off %s | %d | %.1f | %s | %.1f | %s | %s |\n", s.Scenario, s.Started.UTC().Format("2006-01-02 15:04"), s.Rate, s.On, s.Off, i+1, r.Before, secs(r.Cut), r.Trough, secs(r.Recover), stepKind(r))
		}
	}
	b.WriteString("\nA rep that **paused** (its budget at 0: a critical level, which ends only after the signal has stayed under its resume level for the quiet period, 30 s and doubling, by design) or had **no cut** (nothing to act on) is not a pacing step and does not set the bound.\n")
	b.WriteString("\nThe transients, per scenario, over its paced reps (nearest-rank percentiles; goal: the first cut within ")
	fmt.Fprintf(&b, "%.0f s of an onset at p95):\n\n", stepCutGoal)
	b.WriteString("| scenario | onsets | paced | cut p50 s | cut p95 s | recovered | recover p50 s | recover p95 s | cut goal |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, st := range StepSummary(runs) {
		goal := "undecided (no paced rep)"
		switch {
		case st.Paced > 0 && st.CutP95 <= stepCutGoal:
			goal = "met"
		case st.Paced > 0:
			goal = "not met"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %d | %s | %s | %s |\n", st.Scenario, st.Onsets, st.Paced, secs(st.CutP50), secs(st.CutP95),
			st.Recovered, secs(st.RecoverP50), secs(st.RecoverP95), goal)
	}
	longest, known := StepLongest(runs)
	if known {
		fmt.Fprintf(&b, "\nThe longer of the two over every paced rep: **%.1f s**; a closed-loop policy's window is at least three times it, %.0f s.\n", longest, math.Ceil(3*longest))
	} else {
		fmt.Fprintf(&b, "\nNo paced rep, or one that did not recover within its relief: the bound is at least %.1f s, and not known.\n", longest)
	}
	return b.String()
}

// StepStats is one scenario's transients over its paced reps: the
// onsets stepped, the paced ones among them, and the 50th and 95th
// percentiles (nearest rank) of the cut delay and of the recovery, in
// seconds; Recovered counts the paced reps that recovered within their
// relief (a recovery not timed is left out of its percentiles, and named).
type StepStats struct {
	Scenario                 string
	Onsets, Paced, Recovered int
	CutP50, CutP95           float64
	RecoverP50, RecoverP95   float64
}

// StepSummary is each scenario's StepStats over runs, in the runs' order.
func StepSummary(runs []*StepRun) []StepStats {
	var out []StepStats
	for _, s := range runs {
		st := StepStats{Scenario: s.Scenario}
		var cuts, recs []float64
		for _, r := range s.Analyse() {
			st.Onsets++
			if r.Cut < 0 || r.Trough <= 0 {
				continue
			}
			st.Paced++
			cuts = append(cuts, r.Cut)
			if r.Recover >= 0 {
				st.Recovered++
				recs = append(recs, r.Recover)
			}
		}
		st.CutP50, st.CutP95 = nearestRank(cuts, 0.5), nearestRank(cuts, 0.95)
		st.RecoverP50, st.RecoverP95 = nearestRank(recs, 0.5), nearestRank(recs, 0.95)
		out = append(out, st)
	}
	return out
}

// nearestRank is the q-quantile of vs by nearest rank (the smallest value
// with at least q of them at or under it); -1 for none.
func nearestRank(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return -1
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
}

// stepCutGoal is the goal for an onset's first cut at p95, seconds, on
// the primary-side signals: MongoDB's flow control recomputes every
// second.
const stepCutGoal = 1.0

func secs(v float64) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}
