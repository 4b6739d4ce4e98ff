package throttle

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// An exemption from replica_lag lets its job run through a critical pause
// that replica lag alone causes, at the rate it had, with a page; the
// other job pauses. Once another signal goes critical too, or a required
// signal goes stale, the exemption no longer covers the pause.
func TestAnExemptionRunsItsJobThroughAPauseItsSignalCauses(t *testing.T) {
	holds, err := hold.NewLocal(hold.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := setup(t, Config{MaxBudget: 20, InitialBudget: 20, Holds: holds,
		Rules: map[signals.Name]Rule{signals.ReplicaLagSeconds: {Target: 5, Critical: 60}}}, JobConfig{Name: "purge"}, JobConfig{Name: "archive"})
	healthy := world{load: 0.1, used: 0.1}
	before := f.steps(3, healthy)
	h, err := holds.AddAt(at(0), hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceCLI, Reason: "replica being rebuilt", Actor: "alice", TTL: time.Hour, Exempt: string(signals.ReplicaLagSeconds)})
	if err != nil {
		t.Fatal(err)
	}
	if d := f.step(healthy); d.Jobs["purge"].Code == status.CodeExempt || d.Jobs["purge"].Rate == 0 {
		t.Fatalf("an exemption with no pause changed the job: %+v", d.Jobs["purge"])
	}

	lagging := world{load: 0.1, used: 0.1, lag: 3600}
	var d Decision
	var pages []status.Event
	for range 10 {
		d = f.step(lagging)
		for _, e := range d.Events {
			if e.Kind == status.EventExemptCritical {
				pages = append(pages, e)
			}
		}
	}
	if d.Mode != status.ModeCritical {
		t.Fatalf("mode %s under an hour of lag; want critical", d.Mode)
	}
	p, a := d.Jobs["purge"], d.Jobs["archive"]
	if p.Code != status.CodeExempt || !p.Code.Go() || p.Rate <= 0 || p.Rate > before.Jobs["purge"].Rate+1e-9 || len(p.Holds) != 1 || p.Holds[0].ID != h.ID {
		t.Errorf("purge, exempt from replica lag, under a lag critical: %+v; want exempt, at most its rate before (%v)", p, before.Jobs["purge"].Rate)
	}
	if !strings.Contains(p.Reason, "exempt from replica_lag_seconds by hold "+h.ID) || !strings.Contains(p.Reason, "critical") {
		t.Errorf("purge's reason %q", p.Reason)
	}
	if a.Code != status.CodeCritical || a.Rate != 0 {
		t.Errorf("archive, not exempt: %+v; want paused, critical", a)
	}
	if len(pages) != 1 || !pages[0].Page() || !strings.Contains(pages[0].Message, "job purge runs while critical") || !strings.Contains(pages[0].Message, "alice") {
		t.Errorf("pages %+v; want one, saying purge runs while critical and who let it", pages)
	}

	// primary_load goes critical too: the pause is no longer only lag's.
	d = f.steps(10, world{load: 5, raw: 5, used: 0.1, lag: 3600})
	if d.Mode != status.ModeCritical || d.Jobs["purge"].Code != status.CodeCritical || d.Jobs["purge"].Rate != 0 {
		t.Errorf("purge under a load and lag critical: %+v (mode %s); want paused", d.Jobs["purge"], d.Mode)
	}
}

func TestAnExemptionDoesNotCoverAStaleSignalItDoesNotName(t *testing.T) {
	holds, err := hold.NewLocal(hold.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := setup(t, Config{MaxBudget: 20, InitialBudget: 20, Holds: holds}, JobConfig{Name: "purge"})
	f.steps(3, world{load: 0.1, used: 0.1})
	if _, err := holds.AddAt(at(0), hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceCLI, Reason: "r", TTL: time.Hour, Exempt: string(signals.ReplicaLagSeconds)}); err != nil {
		t.Fatal(err)
	}
	d := f.step(world{load: 0.1, used: 0.1, age: time.Minute})
	if d.Mode != status.ModeStale || d.Jobs["purge"].Rate != 0 {
		t.Errorf("every signal stale, purge exempt from lag only: %+v (mode %s); want paused", d.Jobs["purge"], d.Mode)
	}
	// Exempt from the one stale signal: it goes on.
	if _, err := holds.AddAt(at(0), hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceCLI, Reason: "r", TTL: time.Hour, Exempt: string(signals.PrimaryLoad)}); err != nil {
		t.Fatal(err)
	}
	d = f.step(world{load: 0.1, used: 0.1, loadErr: errors.New("permission denied for pg_stat_activity")})
	if d.Mode != status.ModeStale || d.Jobs["purge"].Code != status.CodeExempt || d.Jobs["purge"].Rate <= 0 {
		t.Errorf("primary_load unreadable, purge exempt from it: %+v (mode %s); want exempt, running", d.Jobs["purge"], d.Mode)
	}
	for _, e := range d.Events {
		if e.Kind == status.EventExemptCritical {
			t.Errorf("a stale pause paged as critical: %+v", e)
		}
	}
}

// An exemption from a job rule opens its gate for its job only.
func TestAnExemptionOpensAJobRulesGate(t *testing.T) {
	holds, err := hold.NewLocal(hold.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Holds: holds, JobRules: map[signals.Name]Rule{"orders_backlog": {Target: 1000, MaxAge: 10 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []status.Job{"purge", "archive"} {
		if err := c.Register(JobConfig{Name: j}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := holds.AddAt(at(0), hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceCLI, Reason: "backlog is expected", TTL: time.Hour, Exempt: "orders_backlog"}); err != nil {
		t.Fatal(err)
	}
	d := c.Step(at(1), gateSnap(at(1), gateWorld{backlog: 5000}))
	if d.Jobs["purge"].Code == status.CodeGated || d.Jobs["archive"].Code != status.CodeGated {
		t.Errorf("backlog over target: purge %+v, archive %+v; want only archive gated", d.Jobs["purge"], d.Jobs["archive"])
	}
}
