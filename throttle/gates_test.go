package throttle

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// gateWorld is a healthy primary, vacuums per table, and a custom signal.
type gateWorld struct {
	vacuums   map[string]float64 // table → vacuums running
	vacErr    error
	backlog   float64 // the custom signal "orders_backlog"
	noBacklog bool
	age       time.Duration // of the custom signal's sample
}

func gateSnap(now time.Time, w gateWorld) signals.Snapshot {
	s := snap(now, world{load: 0.2, used: 0.2})
	if w.vacErr != nil {
		s.Samples = append(s.Samples, signals.Sample{Name: signals.VacuumRunningTables, At: now, Err: w.vacErr})
	} else {
		for t, n := range w.vacuums {
			s.Samples = append(s.Samples, signals.Sample{Name: signals.VacuumRunning, Labels: map[string]string{signals.LabelTable: t}, Value: n, Raw: n, At: now})
		}
		s.Samples = append(s.Samples, signals.Sample{Name: signals.VacuumRunningTables, Value: float64(len(w.vacuums)), Raw: float64(len(w.vacuums)), At: now})
	}
	if !w.noBacklog {
		s.Samples = append(s.Samples, signals.Sample{Name: "orders_backlog", Value: w.backlog, Raw: w.backlog, At: now.Add(-w.age)})
	}
	return s
}

func gateController(t *testing.T, jobs ...JobConfig) *Controller {
	t.Helper()
	c, err := New(Config{JobRules: map[signals.Name]Rule{
		signals.VacuumRunning: {Target: 0},
		"orders_backlog":      {Target: 1000, MaxAge: 10 * time.Second},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := c.Register(j); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Autovacuum on the table a job writes pauses that job, with the table in
// its reason, and no other; the others take its share. When the vacuum
// ends the job waits GateHold, then runs again.
func TestVacuumOnItsTableGatesOnlyTheJobThatWritesIt(t *testing.T) {
	c := gateController(t,
		JobConfig{Name: "purge_events", Tables: []string{"public.events"}, Signals: []signals.Name{signals.VacuumRunning}},
		JobConfig{Name: "purge_orders", Tables: []string{"public.orders"}, Signals: []signals.Name{signals.VacuumRunning}})
	d := c.Step(at(1), gateSnap(at(1), gateWorld{}))
	both := d.Jobs["purge_orders"].Rate
	if d.Jobs["purge_events"].Code.Go() == false || both <= 0 {
		t.Fatalf("no vacuum: %+v; want both running", d.Jobs)
	}
	d = c.Step(at(2), gateSnap(at(2), gateWorld{vacuums: map[string]float64{"public.events": 1}}))
	ev, or := d.Jobs["purge_events"], d.Jobs["purge_orders"]
	if ev.Code != status.CodeGated || ev.State != status.JobPaused || ev.Rate != 0 {
		t.Fatalf("vacuum on public.events: purge_events = %+v; want gated, paused, rate 0", ev)
	}
	if !strings.Contains(ev.Reason, `vacuum_running{table="public.events"} at 1, over 0`) {
		t.Errorf("reason %q does not name the table and the reading", ev.Reason)
	}
	if or.Code == status.CodeGated || or.Rate <= both {
		t.Errorf("purge_orders = %+v; want it running with purge_events' share (more than %v)", or, both)
	}
	// The vacuum ends: still shut for GateHold, then open.
	d = c.Step(at(3), gateSnap(at(3), gateWorld{}))
	if d.Jobs["purge_events"].Code != status.CodeGated || !strings.Contains(d.Jobs["purge_events"].Reason, "opens at") {
		t.Errorf("just after the vacuum: %+v; want still gated, saying when it opens", d.Jobs["purge_events"])
	}
	d = c.Step(at(2).Add(DefaultGateHold+time.Second), gateSnap(at(2).Add(DefaultGateHold+time.Second), gateWorld{}))
	if !d.Jobs["purge_events"].Code.Go() || d.Jobs["purge_events"].Rate <= 0 {
		t.Errorf("GateHold after the vacuum: %+v; want running", d.Jobs["purge_events"])
	}
}

// A gate fails closed: the vacuum read failing, or a custom signal that
// is missing or older than its max_age, shuts the jobs it binds.
func TestGatesFailClosed(t *testing.T) {
	for name, w := range map[string]gateWorld{
		"vacuum read failed": {vacErr: errors.New("permission denied")},
		"backlog missing":    {noBacklog: true},
		"backlog stale":      {age: 11 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			c := gateController(t, JobConfig{Name: "purge", Tables: []string{"public.events"}})
			d := c.Step(at(1), gateSnap(at(1), w))
			if jd := d.Jobs["purge"]; jd.Code != status.CodeGated || jd.Rate != 0 || !strings.Contains(jd.Reason, "unknown") {
				t.Errorf("%s: %+v; want gated as unknown", name, jd)
			}
		})
	}
}

// A job with no Signals is bound by every job rule; one that names some
// is bound by those only; one that lists no table is never bound by
// vacuum_running.
func TestWhichGatesBindAJob(t *testing.T) {
	c := gateController(t,
		JobConfig{Name: "all", Tables: []string{"public.events"}},
		JobConfig{Name: "vacuum_only", Tables: []string{"public.events"}, Signals: []signals.Name{signals.VacuumRunning}},
		JobConfig{Name: "no_tables"})
	d := c.Step(at(1), gateSnap(at(1), gateWorld{backlog: 5000}))
	want := map[status.Job]bool{"all": true, "vacuum_only": false, "no_tables": true}
	for j, shut := range want {
		if got := d.Jobs[j].Code == status.CodeGated; got != shut {
			t.Errorf("backlog 5000: %s gated = %v, want %v (%+v)", j, got, shut, d.Jobs[j])
		}
	}
	d = c.Step(at(2).Add(time.Minute), gateSnap(at(2).Add(time.Minute), gateWorld{vacuums: map[string]float64{"public.events": 1}}))
	want = map[status.Job]bool{"all": true, "vacuum_only": true, "no_tables": false}
	for j, shut := range want {
		if got := d.Jobs[j].Code == status.CodeGated; got != shut {
			t.Errorf("vacuum on public.events: %s gated = %v, want %v (%+v)", j, got, shut, d.Jobs[j])
		}
	}
}

// A critical pause names itself, not a gate.
func TestCriticalOutranksAGate(t *testing.T) {
	c := gateController(t, JobConfig{Name: "purge", Tables: []string{"public.events"}})
	var d Decision
	for i := 1; i <= 5; i++ {
		s := gateSnap(at(i), gateWorld{backlog: 5000})
		s.Samples[0].Value, s.Samples[0].Raw = 1.5, 1.5
		d = c.Step(at(i), s)
	}
	if d.Jobs["purge"].Code != status.CodeCritical {
		t.Errorf("critical and gated: %+v; want critical", d.Jobs["purge"])
	}
}

func TestJobRulesAreRefusedWithReasons(t *testing.T) {
	for name, cfg := range map[string]Config{
		"headroom":       {JobRules: map[signals.Name]Rule{signals.ConnectionHeadroom: {Target: 0.1}}},
		"per replica":    {JobRules: map[signals.Name]Rule{signals.ReplicaLagSeconds: {Target: 1}}},
		"critical":       {JobRules: map[signals.Name]Rule{"orders_backlog": {Target: 1, Critical: 2}}},
		"negative":       {JobRules: map[signals.Name]Rule{"orders_backlog": {Target: -1}}},
		"nan":            {JobRules: map[signals.Name]Rule{"orders_backlog": {Target: math.NaN()}}},
		"also a cluster": {Rules: map[signals.Name]Rule{signals.XminHorizonAgeSeconds: {Target: 60}}, JobRules: map[signals.Name]Rule{signals.XminHorizonAgeSeconds: {Target: 60}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg.JobRules)
		}
	}
	c := gateController(t)
	for name, j := range map[string]JobConfig{
		"unqualified table": {Name: "x", Tables: []string{"events"}},
		"unknown signal":    {Name: "x", Signals: []signals.Name{"nope"}},
		"cluster signal":    {Name: "x", Signals: []signals.Name{signals.ConnectionHeadroom}},
	} {
		if err := c.Register(j); err == nil {
			t.Errorf("%s: Register accepted %+v", name, j)
		}
	}
}

// With a PgBouncer sampled, connection headroom counts its fullest pool:
// a full pool in front of a half-empty server leaves no headroom, and a
// failed pool read is unknown, never the server's reading alone.
func TestConnectionHeadroomCountsThePool(t *testing.T) {
	for name, tc := range map[string]struct {
		pool     float64
		poolErr  error
		code     status.Code
		critical bool
	}{
		"pool roomy":  {pool: 0.2, code: status.CodeRunning},
		"pool full":   {pool: 1, critical: true},
		"pool failed": {poolErr: errors.New("pgbouncer: connection refused"), code: status.CodeStale},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Register(JobConfig{Name: "purge"}); err != nil {
				t.Fatal(err)
			}
			var d Decision
			for i := 1; i <= 5; i++ {
				s := snap(at(i), world{load: 0.1, used: 0.3})
				s.Samples = append(s.Samples, signals.Sample{Name: signals.PgBouncerPoolUsedFractionMax, Value: tc.pool, Raw: tc.pool, At: at(i), Err: tc.poolErr})
				d = c.Step(at(i), s)
			}
			switch {
			case tc.critical && d.Mode != status.ModeCritical:
				t.Errorf("mode %s (%s); want critical on connection_headroom", d.Mode, d.Reason)
			case tc.code == status.CodeStale && (d.Mode != status.ModeStale || !strings.Contains(d.Reason, "PgBouncer")):
				t.Errorf("mode %s (%s); want stale, naming PgBouncer", d.Mode, d.Reason)
			case tc.code == status.CodeRunning && !d.Jobs["purge"].Code.Go():
				t.Errorf("job %+v; want it running", d.Jobs["purge"])
			}
		})
	}
}
