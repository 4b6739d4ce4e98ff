package throttled_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// The sampler's grant is re-checked while the client runs, end to end.
// Issue 10, with no replica configured: pg_monitor revoked from the
// sampler role under a CPU-bound session left primary_load reading 0.09,
// 0.03, 0.007 with no error, the mode running and the sidecar's /check
// saying "go". Now the mode is stale, naming the GRANT to run, and the
// job is paused until the grant is back.
func TestClientStopsJobsWhileTheSamplerLacksItsGrant(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	tc, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	p, err := tc.Pacer(jobs.Config{Name: "sampler-grant"})
	if err != nil {
		t.Fatal(err)
	}
	// One busy session on two cores: 0.5, under the default target.
	load, err := c.CPULoad(ctx, 1, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	pgtest.Eventually(t, 20*time.Second, func() error {
		if s, _ := tc.Snapshot().Get("primary_load", nil); s.Err != nil || s.Raw != 0.5 {
			return fmt.Errorf("primary_load raw %v, %v; want 0.5", s.Raw, s.Err)
		}
		return clienttest.Running(p)
	})

	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	exec := func(q string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	grant := "GRANT pg_monitor TO " + pgcluster.RoleMonitor
	t.Cleanup(func() { exec(grant) })
	exec("REVOKE pg_monitor FROM " + pgcluster.RoleMonitor)
	pgtest.Eventually(t, 5*time.Second, func() error {
		if d := tc.Decision(); d.Mode != status.ModeStale {
			return fmt.Errorf("mode %s (%s); want stale", d.Mode, d.Reason)
		}
		if clienttest.Running(p) == nil {
			return errors.New("the job still runs")
		}
		return nil
	})
	d := tc.Decision()
	if d.Binding.String() != "primary_load" || !strings.Contains(d.Reason, `GRANT pg_monitor TO "throttled_monitor"`) {
		t.Errorf("stale on %q for %q; want primary_load, naming the grant", d.Binding, d.Reason)
	}
	js := p.Status()
	r := js.Reason
	if !strings.Contains(r, "GRANT pg_monitor") {
		t.Errorf("job paused for %q; want the grant named", r)
	}
	// It stays stopped while the grant is missing: no tick reads a zero.
	pgtest.Steady(t, 2*time.Second, func() error {
		if done, ok := p.Allow(); ok {
			done(0, 0, nil)
			return errors.New("the job got a token while the sampler cannot see other sessions")
		}
		return nil
	})

	exec(grant)
	pgtest.Eventually(t, 20*time.Second, func() error { return clienttest.Running(p) })
}
