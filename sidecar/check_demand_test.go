package sidecar

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/pacing"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// checkWorld is a process that decides itself, as a solo Client's decide
// loop does (the jobs that waited for their limiters, then a step, then
// the decision applied), with a freno client of job a that asks the
// check (answerCheck) before each chunk: on 200 it copies a chunk of
// chunk, on anything else it backs off for backoff. Time is explicit: the
// limiters read the world's clock, and the controller steps on it.
type checkWorld struct {
	t       *testing.T
	clock   time.Time
	ctl     *throttle.Controller
	ls      *pacing.Limiters
	p       *pacing.LimiterPacer
	next    time.Time // the client's next check
	last    throttle.Decision
	refused int // answers other than 200
}

const (
	checkChunk   = 20 * time.Millisecond
	checkBackoff = 100 * time.Millisecond
)

func newCheckWorld(t *testing.T, cfg throttle.Config, job throttle.JobConfig) *checkWorld {
	t.Helper()
	ctl, err := throttle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Register(job); err != nil {
		t.Fatal(err)
	}
	w := &checkWorld{t: t, clock: time.Date(2026, 5, 11, 9, 0, 0, 0, time.UTC), ctl: ctl}
	w.ls = pacing.NewLimiters(func() time.Time { return w.clock })
	w.p = w.ls.Pacer(ctl, job.Name)
	w.next = w.clock
	return w
}

// second runs one tick: the client's checks within it, then the step at
// its end on a primary_load sample of load taken then. It returns the
// decision and how many checks said go.
func (w *checkWorld) second(load float64) (throttle.Decision, int) {
	w.t.Helper()
	end := w.clock.Add(time.Second)
	oks := 0
	for w.next.Before(end) {
		w.clock = w.next
		a := answerCheck(w.p.Status(), w.p)
		switch a.code {
		case http.StatusOK:
			oks++
			w.next = w.clock.Add(checkChunk)
		default:
			w.refused++
			w.next = w.clock.Add(checkBackoff)
		}
	}
	w.clock = end
	for _, j := range w.ls.Waited() {
		w.ctl.Wanted(j)
	}
	w.last = w.ctl.Step(end, signals.Snapshot{At: end, MaxAge: 3 * time.Second, Samples: []signals.Sample{
		{Name: signals.PrimaryLoad, Value: load, Raw: load, At: end},
		{Name: signals.ConnectionUsedFraction, Value: 0.1, Raw: 0.1, At: end},
	}})
	w.ls.Apply(w.last)
	return w.last, oks
}

// A job paced only by its checks (a freno client, gh-ost's
// --throttle-http: no acquire, no report) grows back to its max_rate
// after a cut, as a library job does. It once did not: /check answered
// from the job's status alone, so its checks were no use of the budget
// and its refusals no demand; the job was lent away as idle (0.02/s of a
// 20/s budget, too_slow: every check 429), and after a cut the budget
// grew to what could not show use and stopped: "low utilization: not
// growing: jobs use 0% of the budget". A 200 now takes a token from the
// job's limiter, a batch of its use, and a 429 for want of one is a
// caller that waited: the job wants more, and its whole rate counts as
// used.
//
// The bound is the controller's: with primary_load back at 0.14 of its
// target, under a quarter of GrowBelow, the budget doubles every tick
// toward 90 % of the 20/s that breached, so from a budget B the job is
// at its 10/s within ⌈log2(10/B)⌉ ticks; two more are the growth's wait
// since the last cut, and one the client's second at the new rate.
func TestCheckDemandGrowsACutBudgetBack(t *testing.T) {
	const maxRate = 10.0
	w := newCheckWorld(t, throttle.Config{MaxBudget: 20, InitialBudget: 20}, throttle.JobConfig{Name: "a", Weight: 1, MaxRate: maxRate})

	// Calm: the job runs at its max_rate and the client goes at it, no
	// faster (a burst of one tick's tokens at most).
	var d throttle.Decision
	var oks, most int
	for range 10 {
		d, oks = w.second(0.1)
		most = max(most, oks)
	}
	if most > 2*int(maxRate) {
		t.Errorf("calm: the client went up to %d times a second at a rate of %v/s: checks are not paced", most, maxRate)
	}
	if jd := d.Jobs["a"]; jd.Rate < maxRate || oks < int(0.9*maxRate) {
		t.Errorf("calm: job a at %.3g/s (%s: %s), the client went %d times in the last second; want %v/s and as many",
			jd.Rate, jd.Code, jd.Reason, oks, maxRate)
	}

	// A signal binds: primary_load at 1.36 of its target, past the
	// emergency level and under the critical one, for six ticks.
	refused := w.refused
	for range 6 {
		d, _ = w.second(0.95)
	}
	if d.Budget > 1 || d.Mode != status.ModeThrottled || w.refused == refused {
		t.Fatalf("after six ticks over target: budget %.3g (%s: %s), %d checks refused; want it cut under 1/s, and 429s",
			d.Budget, d.Mode, d.Reason, w.refused-refused)
	}

	// It clears.
	low := d.Budget
	frozen := false
	for tick := 1; ; tick++ {
		d, oks = w.second(0.1)
		jd := d.Jobs["a"]
		low = min(low, d.Budget)
		bound := int(math.Ceil(math.Log2(maxRate/low))) + 3
		if jd.Rate >= maxRate && oks >= int(0.9*maxRate) {
			t.Logf("recovered from a budget of %.3g/s to the job's max_rate in %d ticks (bound %d)", low, tick, bound)
			break
		}
		if strings.Contains(d.Reason, "low utilization") && !frozen {
			frozen = true
			t.Errorf("tick %d after the signal cleared: %s", tick, d.Reason)
		}
		if tick > bound {
			t.Fatalf("%d ticks after the signal cleared (bound %d from a budget of %.3g/s): budget %.3g (%s), job a at %.3g/s (%s: %s), the client went %d times in the last second",
				tick, bound, low, d.Budget, d.Reason, jd.Rate, jd.Code, jd.Reason, oks)
		}
	}
}
