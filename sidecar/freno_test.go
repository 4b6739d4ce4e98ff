package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// ghostCheck asks as gh-ost's --throttle-http does: a HEAD, no token, and
// only the status code read.
func ghostCheck(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// With open_checks, a freno client that sends no token gets the check, at
// our path and at freno's, and nothing else: the status, the jobs, the
// audit log and the metrics still want a token. The JSON carries freno's
// status keys beside ours, and no more (TestOpenCheckSaysOnlyGoOrWait).
func TestFrenoClientsCheckWithoutAToken(t *testing.T) {
	client, _ := coordinatedClient(t)
	cfg := configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10})
	cfg.OpenReads, cfg.OpenChecks = false, true
	cfg.Tokens = []config.Token{{Name: "ops", Secret: "ops-secret-0123456789", Scopes: []config.Scope{config.ScopeRead}}}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	waitReady(t, hs.URL)

	// Each 200 takes a token of the job's 10/s: each path is asked until
	// it has one.
	for _, path := range []string{"/check/a", "/check/a/mysql/main"} {
		pgtest.Eventually(t, 20*time.Second, func() error {
			if code := ghostCheck(t, hs.URL+path); code != http.StatusOK {
				return fmt.Errorf("HEAD %s = %d, want 200", path, code)
			}
			return nil
		})
	}
	var body []byte
	pgtest.Eventually(t, 5*time.Second, func() error {
		resp, err := http.Get(hs.URL + "/check/a/mysql/main")
		if err != nil {
			return err
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /check/a/mysql/main = %d %s, want 200", resp.StatusCode, body)
		}
		return nil
	})
	var keys map[string]any
	if err := json.Unmarshal(body, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"StatusCode", "Message", "job", "state", "code"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("check JSON %s lacks %q", body, k)
		}
	}
	if keys["StatusCode"] != float64(200) {
		t.Errorf("StatusCode %v, want 200", keys["StatusCode"])
	}
	for _, path := range []string{"/v1/status", "/v1/jobs", "/v1/audit", "/metrics", "/v1/holds"} {
		if code := checkStatus(t, hs.URL+path); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %d; want 401: open_checks opens the check alone", path, code)
		}
	}
	if code := ghostCheck(t, hs.URL+"/check/nope/mysql/main"); code != http.StatusNotFound {
		t.Errorf("unknown job: %d, want 404", code)
	}

	// A hold: gh-ost sees a non-200 and waits.
	if _, err := client.LocalHolds().Add(hold.Request{Scope: hold.OneJob("a"), Source: hold.SourceManual, Reason: "freno test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		if code := ghostCheck(t, hs.URL+"/check/a/mysql/main"); code != http.StatusExpectationFailed {
			return fmt.Errorf("held: HEAD = %d, want 417", code)
		}
		return nil
	})

	// Without open_checks the check wants a token again.
	cfg2 := *cfg
	cfg2.OpenChecks = false
	srv2, err := sidecar.New(client, &cfg2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs2 := httptest.NewServer(srv2.Handler())
	defer hs2.Close()
	if code := ghostCheck(t, hs2.URL+"/check/a"); code != http.StatusUnauthorized {
		t.Errorf("without open_checks: HEAD = %d, want 401", code)
	}
}

// frenoClient is a freno client as gh-ost's --throttle-http is one: before
// each chunk it asks HEAD /check/{job} without a token; on 200 it copies
// the chunk (chunk long) and asks again, on anything else it backs off
// (backoff long, its own pacing) and asks again. It never acquires a
// token nor reports. It keeps the time of every 200 and the last answer.
type frenoClient struct {
	url            string
	chunk, backoff time.Duration

	mu   sync.Mutex
	oks  []time.Time
	last int
	no   int // answers other than 200
}

func (c *frenoClient) run(ctx context.Context) {
	hc := &http.Client{Timeout: 5 * time.Second}
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
		code := 0
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, c.url, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			code = resp.StatusCode
		}
		c.mu.Lock()
		c.last = code
		wait := c.backoff
		if code == http.StatusOK {
			c.oks, wait = append(c.oks, time.Now()), c.chunk
		} else {
			c.no++
		}
		c.mu.Unlock()
		pause.Reset(wait)
	}
}

// okSince counts the 200s answered since t.
func (c *frenoClient) okSince(t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, _ := slices.BinarySearchFunc(c.oks, t, func(a, b time.Time) int { return a.Compare(b) })
	return len(c.oks) - i
}

// refused is how many answers were not 200 so far.
func (c *frenoClient) refused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.no
}

// readStatus reads GET /v1/status (open_reads) and job a in it.
func readStatus(t *testing.T, base string) (api.Status, api.Job, error) {
	t.Helper()
	var st api.Status
	resp, err := http.Get(base + "/v1/status")
	if err != nil {
		return st, api.Job{}, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, api.Job{}, err
	}
	if st.Decision == nil || len(st.Jobs) == 0 {
		return st, api.Job{}, fmt.Errorf("/v1/status: no decision or no job: %+v", st)
	}
	return st, st.Jobs[0], nil
}

// A job paced only through /check (gh-ost's --throttle-http, a freno
// client: it asks before each chunk, goes on 200, backs off on 429, and
// never acquires nor reports) recovers after a cut as a library job does.
// It once did not: its checks counted as no use, so it was lent away as
// idle, and after a cut the budget grew back to a few batches a second and
// stopped at "low utilization: not growing: jobs use 0% of the budget",
// /check answering 429 (too_slow) from then on. Each 200 is now a token
// taken from the job's bucket (a batch's worth of use), and each 429 for
// want of one a caller that waited: demand.
//
// The signal that binds is connection_headroom under a rule that wants
// 25 % of the client slots free: the test opens idle connections until
// 15 % are (pressure 1.67: a cut, then emergency cuts of 75 %), then
// closes them. The recovery bound is the controller's: with headroom's
// pressure back under half of GrowBelow (0.25 over 85 % free or so), the
// budget doubles every two ticks back toward 90 % of the 20/s that
// breached, so from a budget B it reaches the job's max_rate of 10/s in
// 2·⌈log2(10/B)⌉ s; 3 s more are a tick for the new sample, a heartbeat
// each way between the sidecar's worker and the leader, and the client's
// one-second window. From the least budget, MinBudget's 0.02/s, 21 s.
func TestFrenoClientRecoversAfterACut(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	const target, maxRate = 0.25, 10.0
	client, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true, NoForegroundLatency: true,
		Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20, Rules: map[signals.Name]throttle.Rule{
			signals.ConnectionHeadroom: {Target: target, Critical: 0.02, Required: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv, err := sidecar.New(client, configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: maxRate}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	waitReady(t, hs.URL)

	fc := &frenoClient{url: hs.URL + "/check/a", chunk: 10 * time.Millisecond, backoff: 50 * time.Millisecond}
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { fc.run(cctx) })
	t.Cleanup(func() { stop(); wg.Wait() })

	// atMax: the job runs at its max_rate and the client proceeds at
	// about that rate (its 200s in the last second).
	atMax := func() error {
		_, job, err := readStatus(t, hs.URL)
		if err != nil {
			return err
		}
		if n := fc.okSince(time.Now().Add(-time.Second)); job.Rate < maxRate || n < int(0.7*maxRate) {
			return fmt.Errorf("job a at %.3g/s (%s: %s); the client went %d times in the last second; want %v/s and as many", job.Rate, job.Code, job.Reason, n, maxRate)
		}
		return nil
	}
	pgtest.Eventually(t, 30*time.Second, atMax)

	// Bind: fill the client slots to 15 % free.
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	var usable, clients int
	if err := admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
		- COALESCE(NULLIF(current_setting('reserved_connections', true), '')::int, 0),
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&usable, &clients); err != nil {
		t.Fatal(err)
	}
	open := int(math.Ceil(0.85*float64(usable))) - clients
	t.Logf("%d of %d client slots in use (%.0f %% free); opening %d", clients, usable, 100*float64(usable-clients)/float64(usable), open)
	if open <= 0 {
		t.Fatalf("%d of %d client slots in use already", clients, usable)
	}
	conns, err := c.OpenConnections(ctx, open)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conns.Stop() })
	refusedBefore := fc.refused()
	pgtest.Eventually(t, 15*time.Second, func() error {
		st, job, err := readStatus(t, hs.URL)
		if err != nil {
			return err
		}
		if st.Budget > 20.0/4 || job.Rate >= maxRate || fc.refused() == refusedBefore {
			return fmt.Errorf("budget %.3g (%s: %s), job a at %.3g/s, %d refusals since the connections opened; want a cut and a 429",
				st.Budget, st.Mode, st.Reason, job.Rate, fc.refused()-refusedBefore)
		}
		return nil
	})

	// Clear, and time the recovery. The budget may be cut once more by
	// a sample taken before the connections closed: the bound is from the
	// lowest budget the recovery starts at.
	if err := conns.Stop(); err != nil {
		t.Fatal(err)
	}
	cleared := time.Now()
	low := 20.0
	recoveryBound := func() time.Duration {
		return time.Duration(2*math.Ceil(math.Log2(maxRate/max(low, 20.0/1000)))+3) * time.Second
	}
	// The deadline is the bound from the least budget there is
	// (MinBudget, 0.02/s: 21 s), and room for a loaded machine.
	pgtest.Eventually(t, 30*time.Second, func() error {
		st, _, err := readStatus(t, hs.URL)
		if err != nil {
			return err
		}
		low = min(low, st.Budget)
		return atMax()
	})
	took := time.Since(cleared)
	t.Logf("signal cleared at a budget of %.3g/s: recovered to the job's max_rate of %v/s in %s; the controller's bound from that budget %s",
		low, maxRate, took.Round(10*time.Millisecond), recoveryBound())
	if took > recoveryBound()+5*time.Second {
		t.Errorf("recovered in %s from a budget of %.3g/s; the controller's bound is %s", took.Round(10*time.Millisecond), low, recoveryBound())
	}
	// And it stays there, the client going at the rate and no faster:
	// two seconds' tokens and a bucket's burst (a tick's) at most. A
	// client whose checks took nothing went 85 times a second at 10/s,
	// and was lent away as idle within idleTicks.
	steady := time.Now()
	pgtest.Steady(t, 4*time.Second, func() error {
		if n := fc.okSince(time.Now().Add(-2 * time.Second)); n > 3*maxRate {
			return fmt.Errorf("the client went %d times in 2 s at a rate of %v/s", n, maxRate)
		}
		if _, job, err := readStatus(t, hs.URL); err != nil || job.Rate < maxRate {
			return fmt.Errorf("job a at %.3g/s (%s: %s), %v; want %v/s", job.Rate, job.Code, job.Reason, err, maxRate)
		}
		return nil
	})
	if n, secs := fc.okSince(steady), time.Since(steady).Seconds(); float64(n) < 0.8*maxRate*secs {
		t.Errorf("the client went %d times in %.1f s at a rate of %v/s", n, secs, maxRate)
	}
}
