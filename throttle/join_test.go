package throttle

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/throttled/throttled/status"
)

// calm is every signal very far under target: primary_load at 0.07 of
// its target and connection headroom at 0.11, under a quarter of
// GrowBelow, where the budget's slow start doubles every tick.
var calm = world{load: 0.05, used: 0.1}

// startTicks is how many ticks after its first allocation a job that
// joins a running controller reaches its share with every signal very far
// under target: from SlowStart (a quarter) of it, doubling every tick, as
// the budget's slow start does.
const startTicks = 2

// A job that joins a controller already running at a high budget starts
// at a quarter of its share, not with all of it at once, and doubles to
// its share within startTicks ticks while the signals are far under
// target; what it holds back goes to the job already running.
func TestAJobJoiningARunningControllerStartsAtAQuarterOfItsShare(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 10})
	if d := f.steps(6, calm); d.Budget != 100 {
		t.Fatalf("one busy job, calm: budget %v; want 100, the most", d.Budget)
	}
	if err := f.c.Register(JobConfig{Name: "archive"}); err != nil {
		t.Fatal(err)
	}
	d := f.step(calm)
	share := d.Budget / 2 // two busy jobs of weight 1
	jd := d.Jobs["archive"]
	if jd.Rate > share/4+1e-9 || jd.Code != status.CodeSlowStart {
		t.Fatalf("archive's first allocation: %v (%s: %s); want at most a quarter of its share %v, slow_start", jd.Rate, jd.Code, jd.Reason, share)
	}
	if got := d.Jobs["purge"].Rate + jd.Rate; math.Abs(got-d.Budget) > 1e-6 {
		t.Fatalf("purge %v + archive %v of a budget %v: what the slow start holds back is not lent", d.Jobs["purge"].Rate, jd.Rate, d.Budget)
	}
	rates := []float64{jd.Rate}
	for range startTicks {
		d = f.step(calm)
		rates = append(rates, d.Jobs["archive"].Rate)
	}
	if jd := d.Jobs["archive"]; jd.Rate < d.Budget/2*0.999 || jd.Code == status.CodeSlowStart {
		t.Fatalf("archive's rates from its first allocation: %v (%s); want its share %v within %d ticks", rates, jd.Code, d.Budget/2, startTicks)
	}
	for i := 1; i < len(rates); i++ {
		if rates[i] > 2*rates[i-1]+1e-9 {
			t.Fatalf("archive's rates %v: grew faster than a doubling a tick", rates)
		}
	}
}

// The pair's case: a leader idle at its initial budget (10/s: a tenth
// of its 100), its one job never running, and an exec of --max-rate 10
// joins it. The exec starts at 2.5/s, a quarter of its share (its whole
// --max-rate), as the same exec alone starts (--initial-rate defaults
// to a quarter of --max-rate), and reaches 10/s in startTicks ticks.
func TestAnExecJoiningAnIdleLeaderStartsAsItWouldAlone(t *testing.T) {
	alone := setup(t, Config{MaxBudget: 10, InitialBudget: 2.5}, JobConfig{Name: "exec", MaxRate: 10})
	var soloRates []float64
	for range startTicks + 1 {
		soloRates = append(soloRates, alone.step(calm).Jobs["exec"].Rate)
	}

	c, err := New(Config{MaxBudget: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(JobConfig{Name: "purge"}); err != nil {
		t.Fatal(err)
	}
	tick := 0
	var d Decision
	for range 10 { // purge never runs: idle, its share lent
		tick++
		d = c.Step(at(tick), snap(at(tick), calm))
	}
	if d.Budget != 10 {
		t.Fatalf("idle leader: budget %v; want its initial 10", d.Budget)
	}
	if err := c.Register(JobConfig{Name: "exec", MaxRate: 10}); err != nil {
		t.Fatal(err)
	}
	var joinedRates []float64
	for range startTicks + 1 {
		tick++
		d = c.Step(at(tick), snap(at(tick), calm))
		r := d.Jobs["exec"].Rate
		joinedRates = append(joinedRates, r)
		for range int(math.Round(r)) { // the exec uses all it gets, and waits for more
			c.Report("exec", Feedback{Rows: 100, Duration: 20 * time.Millisecond})
		}
		c.Wanted("exec")
	}
	if joinedRates[0] > 10*0.25+1e-9 {
		t.Fatalf("exec joining an idle leader at 10/s: first allocation %v; want at most 2.5, a quarter of its share", joinedRates[0])
	}
	// Its share is the budget less the little the idle job keeps (1.5
	// times its use and MinBudget, 0.1/s): 9.9/s until the budget grows.
	for i, r := range joinedRates {
		if r > soloRates[i]+1e-9 || r < 0.98*soloRates[i] {
			t.Fatalf("exec's rates joining the idle leader %v, alone %v: the join does not start as the exec alone does", joinedRates, soloRates)
		}
	}
	if jd := d.Jobs["exec"]; jd.Rate < d.Budget-d.Jobs["purge"].Rate-1e-9 || jd.Code == status.CodeSlowStart {
		t.Fatalf("exec's rates joining: %v (%s); want its share %v within %d ticks", joinedRates, jd.Code, d.Budget-d.Jobs["purge"].Rate, startTicks)
	}
}

// A job registered at a controller's own start is not slowed twice: the
// budget's slow start (from InitialBudget, a quarter of the most for an
// exec) is its start, whether it registers before the first step or
// after steps that had no job to give a rate to (a Client's decide loop
// steps while its job is being made) or gave none (warming up).
func TestAJobAtTheControllersStartIsNotSlowedTwice(t *testing.T) {
	cfg := Config{MaxBudget: 10, InitialBudget: 2.5}
	want := []float64{2.5, 5, 10}
	for _, tc := range []struct {
		name   string
		before world // the steps before the job registers
		n      int
	}{
		{"registered before the first step", calm, 0},
		{"registered after steps with no job", calm, 3},
		{"registered after steps without a sample", world{load: 0.05, used: 0.1, loadErr: errors.New("signals: timed out")}, 3},
	} {
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tick := 0
		for range tc.n {
			tick++
			c.Step(at(tick), snap(at(tick), tc.before))
		}
		if err := c.Register(JobConfig{Name: "exec", MaxRate: 10}); err != nil {
			t.Fatal(err)
		}
		var got []float64
		for range want {
			tick++
			d := c.Step(at(tick), snap(at(tick), calm))
			jd := d.Jobs["exec"]
			got = append(got, jd.Rate)
			for range int(math.Round(jd.Rate)) {
				c.Report("exec", Feedback{Rows: 100, Duration: 20 * time.Millisecond})
			}
			c.Wanted("exec")
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				t.Errorf("%s: rates %v; want %v, the budget's own slow start", tc.name, got, want)
				break
			}
		}
	}
}

// A job whose workers all left (the leader unregisters it) and come back
// joins again: it starts at a quarter of its share once more.
func TestAJobThatComesBackStartsSlowlyAgain(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 10}, JobConfig{Name: "purge"}, JobConfig{Name: "archive"})
	d := f.steps(8, calm)
	if math.Abs(d.Jobs["archive"].Rate-50) > 1e-9 {
		t.Fatalf("archive at %v; want 50, half of 100", d.Jobs["archive"].Rate)
	}
	f.c.Unregister("archive")
	f.steps(2, calm)
	if err := f.c.Register(JobConfig{Name: "archive"}); err != nil {
		t.Fatal(err)
	}
	if r := f.step(calm).Jobs["archive"].Rate; r > 50*0.25+1e-9 {
		t.Fatalf("archive back: first allocation %v; want at most 12.5, a quarter of its share", r)
	}
}

// A job that joins held (a hold on it before its first share) starts its
// slow start at its release: a quarter of its share, not the floor a
// job released with no rate before would ramp from.
func TestAJobThatJoinsHeldStartsAtItsRelease(t *testing.T) {
	holds := fakeHolds{}
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 10, Holds: holds})
	f.steps(6, calm)
	holds["archive"] = true
	if err := f.c.Register(JobConfig{Name: "archive"}); err != nil {
		t.Fatal(err)
	}
	if jd := f.steps(3, calm).Jobs["archive"]; jd.State != status.JobPaused {
		t.Fatalf("held archive: %s", jd.State)
	}
	delete(holds, "archive")
	d := f.step(calm)
	if r := d.Jobs["archive"].Rate; r > d.Budget/2*0.25+1e-9 || r < d.Budget/2*0.25-1e-9 {
		t.Fatalf("archive released: %v; want a quarter of its share %v", r, d.Budget/2)
	}
	if d = f.steps(startTicks, calm); d.Jobs["archive"].Rate < d.Budget/2*0.999 {
		t.Fatalf("archive %v %d ticks after its release; want its share %v", d.Jobs["archive"].Rate, startTicks, d.Budget/2)
	}
}

// The slow start of a job that joined grows only as the signals allow:
// not over target, by MaxGrowth in the deadband, and an idle job keeps
// it, its share lent, until it runs.
func TestAJoinedJobsSlowStartGrowsAsTheSignalsAllow(t *testing.T) {
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 10})
	f.steps(6, calm)
	if err := f.c.Register(JobConfig{Name: "archive"}); err != nil {
		t.Fatal(err)
	}
	first := f.step(calm).Jobs["archive"].Rate
	// In the deadband (primary_load at 0.97 of its target): the budget
	// holds, and the slow start grows by MaxGrowth a tick.
	deadband := world{load: 0.68, used: 0.1}
	d := f.step(deadband)
	if r := d.Jobs["archive"].Rate; math.Abs(r-first*1.25) > 1e-9 {
		t.Fatalf("archive in the deadband: %v -> %v (%s); want ×1.25", first, r, d.Reason)
	}
	// Over target: the budget is cut, and the slow start does not grow.
	over := world{load: 0.8, used: 0.1}
	before := d.Jobs["archive"].Rate
	d = f.step(over)
	if r := d.Jobs["archive"].Rate; r > before+1e-9 {
		t.Fatalf("archive over target: %v -> %v (%s); want no growth", before, r, d.Reason)
	}

	// An idle job that joined keeps its slow start while its share is
	// lent, and starts from a quarter of its share when it runs.
	g := setup(t, Config{MaxBudget: 100, InitialBudget: 10})
	g.steps(6, calm)
	if err := g.c.Register(JobConfig{Name: "idle"}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		// Only purge runs.
		for range int(math.Round(g.last.Jobs["purge"].Rate)) {
			g.c.Report("purge", Feedback{Rows: 100, Duration: 20 * time.Millisecond})
		}
		g.c.Wanted("purge")
		g.tick++
		g.last = g.c.Step(at(g.tick), snap(at(g.tick), calm))
	}
	if r := g.last.Jobs["idle"].Rate; r > 5 {
		t.Fatalf("idle job after 10 ticks unused: %v; want its share lent", r)
	}
	g.c.Wanted("idle") // it runs: its callers wait for its limiter
	d = g.step(calm)
	if r := d.Jobs["idle"].Rate; r > d.Budget/2*0.25+1e-9 {
		t.Fatalf("the joined job, idle until now: %v; want at most a quarter of its share %v", r, d.Budget/2)
	}
}
