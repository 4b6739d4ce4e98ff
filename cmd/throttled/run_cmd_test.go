package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/sidecar/remote"
)

const (
	opsToken    = "ops-token-0123456789abcdef"
	viewerToken = "viewer-token-0123456789abcdef"
	workerToken = "worker-token-0123456789abcdef"
)

func writeConfig(t *testing.T, path string, c *pgcluster.Cluster, addr, replica, extra string) {
	t.Helper()
	src := fmt.Sprintf(`primary {
  dsn              = %q
  coordination_dsn = %q
  cores            = 2
}
replica %q {
  policy = "required"
}
listen {
  address = %q
}
token "ops" {
  secret = env("THROTTLED_TEST_TOKEN_OPS")
  scopes = ["read", "pause", "admin"]
}
token "viewer" {
  secret = env("THROTTLED_TEST_TOKEN_VIEWER")
  scopes = ["read"]
}
token "worker" {
  secret = env("THROTTLED_TEST_TOKEN_WORKER")
  scopes = ["work"]
}
controller {
  max_budget   = 5
  quiet_period = "3s"
}
job "purge" {
  weight = 1
}
notifier "webhook" {
  url    = "http://127.0.0.1:18099/hook"
  secret = env("THROTTLED_TEST_TOKEN_OPS")
}
%s`, c.Primary.DSN(pgcluster.RoleMonitor), c.Primary.DSN(pgcluster.RoleAdmin), replica, addr, extra)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
}

type sidecarAPI struct {
	t    *testing.T
	base string
}

func (a sidecarAPI) do(method, path, token string, body any) (int, map[string]any, []any) {
	a.t.Helper()
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.base+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var obj map[string]any
	var arr []any
	if json.Unmarshal(raw, &obj) != nil {
		json.Unmarshal(raw, &arr)
	}
	return resp.StatusCode, obj, arr
}

func TestSidecarAPI(t *testing.T) {
	c := pgtest.Cluster(t)
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	addr := freeAddr(t)
	path := t.TempDir() + "/throttled.hcl"
	writeConfig(t, path, c, addr, "replica1", "")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "--config", path, "--log-level", "warn"}, &out, &errOut) }()
	a := sidecarAPI{t: t, base: "http://" + addr}
	waitReady(t, a.base, 20*time.Second)

	// Every mutating route needs a token with pause or admin; none is a GET.
	for _, r := range sidecar.Routes() {
		method, p, _ := strings.Cut(r.Pattern, " ")
		if method != "GET" && method != "HEAD" && r.Scope != "pause" && r.Scope != "admin" && r.Scope != "work" && r.Scope != sidecar.ScopeHook && r.Scope != sidecar.ScopeUI {
			t.Errorf("route %s mutates without pause, admin, work or a signed hook", r.Pattern)
		}
		if method == "GET" && (r.Scope == "pause" || r.Scope == "admin" || r.Scope == "work") {
			t.Errorf("route %s needs a mutating scope on a GET", r.Pattern)
		}
		p = strings.NewReplacer("{job}", "purge", "{id}", "h1").Replace(p)
		if code, _, _ := a.do(method, p, "", nil); r.Scope != "" && code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d; want 401", method, p, code)
		}
	}
	if code, _, _ := a.do("GET", "/v1/status", "not-a-token-at-all", nil); code != 401 {
		t.Fatalf("unknown token: %d", code)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, st, _ := a.do("GET", "/v1/status", viewerToken, nil)
		if code != 200 || st["leader"] != true || st["mode"] == nil || st["mode"] == "" {
			return fmt.Errorf("status %d %v", code, st)
		}
		return nil
	})
	if code, _, _ := a.do("GET", "/check/nope", viewerToken, nil); code != 404 {
		t.Fatalf("check of an unknown job: %d", code)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		if code, body, _ := a.do("GET", "/check/purge", viewerToken, nil); code != 200 {
			return fmt.Errorf("check purge: %d %v", code, body)
		}
		return nil
	})

	// A remote worker, through the Go client, is paced like a local one:
	// never faster than the budget (at most 5 batches/s here).
	rc, err := remote.New(remote.Config{BaseURL: a.base, Token: workerToken})
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var remoteBatches atomic.Int64
	rj, err := jobs.New(jobs.Config{Name: "purge"}, db, rc.Pacer("purge"), func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		_, err := tx.Exec(ctx, "SELECT 1")
		return jobs.Result{Rows: 1, Done: remoteBatches.Add(1) >= 12}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := rj.Run(ctx); err != nil {
		t.Fatalf("remote job: %v", err)
	}
	if elapsed := time.Since(start); 12 > 5+5*elapsed.Seconds()+1 {
		t.Fatalf("12 remote batches in %s: faster than 5 a second", elapsed)
	}
	if code, _, _ := a.do("POST", "/v1/jobs/purge/acquire", viewerToken, api.AcquireRequest{N: 1}); code != 403 {
		t.Fatalf("acquire with a read token: %d", code)
	}
	if code, _, _ := a.do("POST", "/v1/jobs/purge/report", workerToken, api.ReportRequest{Token: "forged"}); code != 404 {
		t.Fatalf("report of an unknown token: %d", code)
	}
	if code, _, _ := a.do("POST", "/v1/jobs/purge/acquire", workerToken, api.AcquireRequest{N: 1000}); code != 400 {
		t.Fatalf("acquire of 1000 tokens: %d", code)
	}

	// Pausing needs the pause scope; the actor comes from the token.
	if code, _, _ := a.do("POST", "/v1/holds", viewerToken, api.PauseRequest{Scope: "job:purge", Reason: "x"}); code != 403 {
		t.Fatalf("viewer paused: %d", code)
	}
	for _, bad := range []any{`{"scope": "job:purge"`, `{"scope":"job:purge","reason":"x","extra":1}`, api.PauseRequest{Scope: "jobs:purge", Reason: "x"},
		api.PauseRequest{Scope: "job:purge", Reason: ""}, api.PauseRequest{Scope: "all", Reason: "x", TTL: "48h"}} {
		if code, body, _ := a.do("POST", "/v1/holds", opsToken, bad); code != 400 || body["error"] == "" {
			t.Errorf("bad pause %v: %d %v", bad, code, body)
		}
	}
	code, hold, _ := a.do("POST", "/v1/holds", opsToken, api.PauseRequest{Scope: "job:purge", TTL: "10m", Reason: "replica rebuild"})
	if code != 201 || hold["actor"] != "token:ops" || hold["scope"] != "job:purge" {
		t.Fatalf("pause: %d %v", code, hold)
	}
	pgtest.Eventually(t, 2*time.Second, func() error {
		if code, body, _ := a.do("GET", "/check/purge", viewerToken, nil); code != 417 {
			return fmt.Errorf("check while held: %d %v", code, body)
		}
		return nil
	})
	if code, _, list := a.do("GET", "/v1/holds", viewerToken, nil); code != 200 || len(list) != 1 {
		t.Fatalf("holds: %d %v", code, list)
	}
	if code, _, _ := a.do("DELETE", "/v1/holds/"+hold["id"].(string), opsToken, nil); code != 200 {
		t.Fatalf("resume: %d", code)
	}
	pgtest.Eventually(t, 5*time.Second, func() error {
		if code, _, _ := a.do("GET", "/check/purge", viewerToken, nil); code == 417 {
			return fmt.Errorf("still held")
		}
		return nil
	})

	// A reload naming a replica that does not exist is refused whole; the
	// last good configuration stays. A good one applies.
	_, st, _ := a.do("GET", "/v1/status", viewerToken, nil)
	version := st["config_version"]
	writeConfig(t, path, c, addr, "db-retired", "job \"archive\" {\n  weight = 2\n}\n")
	code, body, _ := a.do("POST", "/v1/reload", opsToken, nil)
	if code != 409 || !strings.Contains(fmt.Sprint(body["error"]), `replica "db-retired" does not exist`) {
		t.Fatalf("reload of a bad config: %d %v", code, body)
	}
	if _, st, _ := a.do("GET", "/v1/status", viewerToken, nil); st["config_version"] != version {
		t.Fatalf("refused reload changed the version: %v -> %v", version, st["config_version"])
	}
	if code, _, _ := a.do("GET", "/v1/jobs/archive", viewerToken, nil); code != 404 {
		t.Fatalf("refused reload half-applied: job archive exists (%d)", code)
	}
	if code, _, _ := a.do("POST", "/v1/reload", viewerToken, nil); code != 403 {
		t.Fatalf("viewer reloaded: %d", code)
	}
	writeConfig(t, path, c, addr, "replica1", "job \"archive\" {\n  weight = 2\n}\n")
	if code, body, _ := a.do("POST", "/v1/reload", opsToken, nil); code != 200 || body["applied"] != true {
		t.Fatalf("reload of a good config: %d %v", code, body)
	}
	if code, _, _ := a.do("GET", "/v1/jobs/archive", viewerToken, nil); code != 200 {
		t.Fatalf("job archive after the reload: %d", code)
	}
	// Metrics: linted, and saying what happened.
	req, _ := http.NewRequest("GET", a.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	problems, err := promlint.New(bytes.NewReader(metrics)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "throttled_") {
			t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
		}
	}
	for _, want := range []string{"throttled_controller_leader 1", `throttled_config_reloads_total{result="refused"} 1`,
		`throttled_config_reloads_total{result="applied"} 1`, `throttled_jobs_rate_batches_per_second{throttled_job="archive"}`,
		`throttled_signals_value{replica="",signal="primary_load"}`, `throttled_holds_active{source="manual"} 0`, "throttled_build_info{", `throttled_notifications_sent_total{notifier="webhook"} 0`,
		"throttled_enforce_violations 0", "throttled_controller_latched 0", `throttled_jobs_batches_total{throttled_job="purge"} 12`,
		`throttled_jobs_rows_total{throttled_job="purge"} 12`, `throttled_jobs_wait_seconds_bucket{throttled_job="purge"`, `throttled_signals_samples_total{server="primary"}`,
		`throttled_jobs_limited_seconds_total{throttled_job="purge",why=`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, line := range strings.Split(string(metrics), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "throttled_") && strings.Contains(line, "_total") && !strings.Contains(name, "_total") {
			t.Errorf("counter name without _total: %s", line)
		}
	}

	// The CLI works through the API as well as against the database.
	t.Setenv("THROTTLED_TOKEN", opsToken)
	if out := cli(t, "pause", "--addr", a.base, "--job", "purge", "--ttl", "5m", "--reason", "from the CLI"); !strings.Contains(out, "on job:purge by token:ops") {
		t.Fatalf("pause --addr: %s", out)
	}
	if out := cli(t, "holds", "--addr", a.base); !strings.Contains(out, "from the CLI") {
		t.Fatalf("holds --addr: %s", out)
	}
	if out := cli(t, "resume", "--addr", a.base, "--job", "purge", "--reason", "done"); !strings.Contains(out, "released hold") {
		t.Fatalf("resume --addr: %s", out)
	}
	if out := cli(t, "status", "--addr", a.base); !strings.Contains(out, "leader: true") || !regexp.MustCompile(`(?m)^purge .* ran [0-9hms.]+: [0-9]+ % `).MatchString(out) {
		t.Fatalf("status --addr: %s", out)
	}
	if out := cli(t, "status", "--primary-dsn", c.Primary.DSN(pgcluster.RoleAdmin)); !strings.Contains(out, "leader ") || !strings.Contains(out, "purge") {
		t.Fatalf("status --primary-dsn: %s", out)
	}
	if out := cli(t, "audit", "--addr", a.base, "--since", "1h"); !strings.Contains(out, "from the CLI") {
		t.Fatalf("audit --addr: %s", out)
	}
	t.Setenv("THROTTLED_TOKEN", viewerToken)
	var eo bytes.Buffer
	if code := run(context.Background(), []string{"pause", "--addr", a.base, "--all", "--reason", "x"}, io.Discard, &eo); code != exitError || !strings.Contains(eo.String(), "403") {
		t.Fatalf("pause --addr with a read token: exit %d: %s", code, eo.String())
	}

	_, _, audit := a.do("GET", "/v1/audit?since=1h", viewerToken, nil)
	text := fmt.Sprint(audit)
	for _, want := range []string{"hold_created", "hold_released", "config_reload", "refused: ", "applied version", "token:ops"} {
		if !strings.Contains(text, want) {
			t.Errorf("audit lacks %q", want)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("run exit %d: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop within 20 s")
	}
	if !strings.Contains(out.String(), "throttled: stopped") {
		t.Fatalf("output: %s", out.String())
	}
	if all := out.String() + errOut.String(); strings.Contains(all, opsToken) || strings.Contains(all, c.Password(pgcluster.RoleMonitor)) {
		t.Fatal("a secret reached the output")
	}
}

// waitReady polls base+"/readyz" until it answers 200, or fails the test.
func waitReady(t *testing.T, base string, timeout time.Duration) {
	t.Helper()
	pgtest.Eventually(t, timeout, func() error {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
}
