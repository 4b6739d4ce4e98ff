package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/dashboards"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/sidecar/remote"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	// Under the ephemeral range, so no outgoing connection takes it
	// before the server binds it (pgcluster.FreePorts).
	ports, err := pgcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}

// startPrometheus runs the Debian prometheus on a loopback port, scraping
// target every second with the viewer token and cluster="db1".
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("no prometheus on PATH; make deps installs the Debian package")
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: throttled
    authorization: {credentials: %q}
    static_configs:
      - targets: [%q]
        labels: {cluster: db1}
`, viewerToken, target)
	if err := os.WriteFile(dir+"/prometheus.yml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+dir+"/prometheus.yml", "--storage.tsdb.path="+dir+"/data",
		"--web.listen-address="+addr, "--log.level=warn")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	base := "http://" + addr
	pgtest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("prometheus not ready: %d", resp.StatusCode)
		}
		return nil
	})
	return base
}

// promSeries runs an instant query and returns how many series it gave.
func promSeries(base, expr string) (int, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("%s: %s", err, b)
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", expr, out.Error)
	}
	return len(out.Data.Result), nil
}

// A real Prometheus scraping a real throttled run, with a remote worker
// running batches and a hold placed and released: every query of every
// dashboard panel returns series.
func TestEveryDashboardQueryHasDataInPrometheus(t *testing.T) {
	c := pgtest.Cluster(t)
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	addr := freeAddr(t)
	path := t.TempDir() + "/throttled.hcl"
	// A stand-in for Grafana's annotations API (Grafana is not installable
	// here): it records what the leader pushes.
	var annMu sync.Mutex
	var annCalls []string
	grafana := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		annMu.Lock()
		annCalls = append(annCalls, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(b))
		annMu.Unlock()
		switch r.Method {
		case http.MethodGet:
			io.WriteString(w, "[]")
		default:
			io.WriteString(w, `{"id": 7}`)
		}
	}))
	defer grafana.Close()
	pushed := func(prefix, contains string) error {
		annMu.Lock()
		defer annMu.Unlock()
		for _, call := range annCalls {
			if strings.HasPrefix(call, prefix) && strings.Contains(call, contains) {
				return nil
			}
		}
		return fmt.Errorf("Grafana got no %s with %s; it got %q", prefix, contains, annCalls)
	}
	t.Setenv("THROTTLED_TEST_GRAFANA_SA", "glsa_dashboard_test_token")
	writeConfig(t, path, c, addr, "replica1", fmt.Sprintf("grafana {\n  url = %q\n  service_account_token = env(\"THROTTLED_TEST_GRAFANA_SA\")\n}\n", grafana.URL))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--log-level", "off"}, io.Discard, io.Discard)
	}()
	defer func() { cancel(); <-done }()
	base := "http://" + addr
	waitReady(t, base, 20*time.Second)
	prom := startPrometheus(t, addr)

	// Scripted load: a remote worker's batches (rows, batches, wait
	// times), one that fails once (errors), and a hold placed and
	// released (holds by source).
	rc, err := remote.New(remote.Config{BaseURL: base, Token: workerToken})
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(ctx, c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	rj, err := jobs.New(jobs.Config{Name: "purge", Total: 100_000}, db, rc.Pacer("purge"), func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		n++
		if n == 3 { // retryable: the job goes on
			_, err := tx.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'scripted failure' USING ERRCODE = '40001'; END $$")
			return jobs.Result{}, err
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(0.01)")
		return jobs.Result{Rows: 10}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go rj.Run(workCtx)
	a := sidecarAPI{t: t, base: base}
	code, hold, _ := a.do("POST", "/v1/holds", opsToken, api.PauseRequest{Scope: "job:archive", Reason: "dashboard test", TTL: "10m"})
	if code != 201 {
		t.Fatalf("pause: %d", code)
	}
	// The pair is shared: leave no hold behind for the next test (also
	// deferred, so it runs while the sidecar still serves).
	var released bool
	release := func() {
		if released {
			return
		}
		released = true
		if code, _, _ := a.do("DELETE", fmt.Sprintf("/v1/holds/%v", hold["id"]), opsToken, nil); code != 200 {
			t.Errorf("release the dashboard test's hold %v: %d", hold["id"], code)
		}
	}
	defer release()

	type query struct{ where, expr string }
	var queries, optional []query
	vars := strings.NewReplacer("$cluster", "db1", "$__rate_interval", "20s", "$__range", "5m")
	for file, d := range dashboards.All() {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				q := query{fmt.Sprintf("%s: %q %s", file, p.Title, tg.RefID), vars.Replace(tg.Expr)}
				// This run reads no Prometheus signal: their panels are
				// TestDashboardShowsPrometheusSignals's, and valid here.
				if strings.Contains(tg.Expr, "throttled_signals_prometheus_info") || strings.Contains(tg.Expr, "throttled_signals_baseline") {
					optional = append(optional, q)
					continue
				}
				queries = append(queries, q)
			}
		}
		// The hold regions must show the hold above; the auto-pause
		// regions are empty in a calm run, but must be valid queries.
		for _, a := range d.Annotations.List {
			if a.Expr == "" {
				continue
			}
			q := query{fmt.Sprintf("%s: annotation %q", file, a.Name), vars.Replace(a.Expr)}
			if strings.Contains(a.Expr, "throttled_holds_info") {
				queries = append(queries, q)
			} else {
				optional = append(optional, q)
			}
		}
	}
	for _, q := range optional {
		if _, err := promSeries(prom, q.expr); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
	}
	sort.Slice(queries, func(i, j int) bool { return queries[i].where < queries[j].where })
	start := time.Now()
	pgtest.Eventually(t, 90*time.Second, func() error {
		var empty []string
		for _, q := range queries {
			if n, err := promSeries(prom, q.expr); err != nil {
				return err
			} else if n == 0 {
				empty = append(empty, q.where+": "+q.expr)
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("%d of %d queries return no series:\n%s", len(empty), len(queries), strings.Join(empty, "\n"))
		}
		return nil
	})
	// Then the hold ends and the primary climbs (two sessions spinning on
	// two cores): Prometheus sees the budget cut, and the load fall back
	// once they stop. The plot below shows all of it on one axis.
	atLeast := func(expr string, min float64, d time.Duration) {
		t.Helper()
		pgtest.Eventually(t, d, func() error {
			if v := promValue(t, prom, expr); v < min {
				return fmt.Errorf("%s = %g; waiting for %g", expr, v, min)
			}
			return nil
		})
	}
	atLeast(`count_over_time(up{cluster="db1"}[1m])`, 10, 30*time.Second) // ten seconds of the hold
	// The leader pushed the hold to Grafana as a region; its release
	// cuts the region's end.
	pgtest.Eventually(t, 10*time.Second, func() error {
		return pushed("POST /api/annotations Bearer glsa_dashboard_test_token", fmt.Sprintf(`"hold:%v"`, hold["id"]))
	})
	release()
	pgtest.Eventually(t, 10*time.Second, func() error { return pushed("PATCH /api/annotations/7 ", `"timeEnd"`) })
	load := `max(throttled_signals_value{signal="primary_load",cluster="db1"})`
	budget := `max(throttled_controller_budget_batches_per_second{cluster="db1"})`
	// After the release the budget restarts slowly from 0: take the one
	// before the load once it is back above 0, or no cut could show.
	var before float64
	pgtest.Eventually(t, 30*time.Second, func() error {
		if before = promValue(t, prom, budget); before <= 0 {
			return fmt.Errorf("budget %g after the release; waiting for it to grow back", before)
		}
		return nil
	})
	spin, err := c.CPULoad(ctx, 2, 8*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer spin.Stop()
	atLeast(load, 0.7, 30*time.Second)
	pgtest.Eventually(t, 30*time.Second, func() error {
		if v := promValue(t, prom, budget); v >= before {
			return fmt.Errorf("budget %g under load; %g before it", v, before)
		}
		return nil
	})
	pgtest.Eventually(t, 60*time.Second, func() error {
		if v := promValue(t, prom, load); v >= 0.3 {
			return fmt.Errorf("primary_load still %g after the load", v)
		}
		return nil
	})
	// The overview's key series from this run, drawn from Prometheus with
	// the dashboard's own queries (there is no Grafana here to render
	// them): $THROTTLED_PLOTS, or a temporary directory.
	dir := cmp.Or(os.Getenv("THROTTLED_PLOTS"), t.TempDir())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "overview-test.png")
	drawOverview(t, overviewFromPrometheus(t, prom, start.Add(-time.Minute), time.Now()), path)
}

// point is one sample of a series Prometheus answered.
type point struct {
	T time.Time
	V float64
}

// rangeSeries is one series of a range query: its labels and samples.
type rangeSeries struct {
	labels map[string]string
	points []point
}

// overview is the overview dashboard's key series over one run, read
// from Prometheus through the dashboard's own queries; the lab build
// draws it (drawOverview).
type overview struct {
	Load, Budget, Headroom       []point
	JobRates, RowsPerSecond, Lag map[string][]point
	// Mode maps each mode to the instants the job was in it.
	Mode map[string][]point
	// Holds are the throttled_holds_info series, one per hold.
	Holds []rangeSeries
}

// promValue is an instant query's single value.
func promValue(t *testing.T, base, expr string) float64 {
	t.Helper()
	now := time.Now()
	for _, s := range promRange(t, base, expr, now, now) {
		if len(s.points) > 0 {
			return s.points[len(s.points)-1].V
		}
	}
	t.Fatalf("%s: no value", expr)
	return 0
}

// promRange runs a range query at a 1 s step: each series' labels and
// samples.
func promRange(t *testing.T, base, expr string, from, to time.Time) []rangeSeries {
	t.Helper()
	q := url.Values{"query": {expr}, "start": {strconv.FormatInt(from.Unix(), 10)}, "end": {strconv.FormatInt(to.Unix(), 10)}, "step": {"1"}}
	resp, err := http.Get(base + "/api/v1/query_range?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Status != "success" {
		t.Fatalf("query_range %s: %v %s", expr, err, out.Error)
	}
	var series []rangeSeries
	for _, r := range out.Data.Result {
		var pts []point
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			pts = append(pts, point{T: time.Unix(0, int64(ts*1e9)), V: f})
		}
		series = append(series, rangeSeries{r.Metric, pts})
	}
	return series
}

// overviewFromPrometheus reads the overview's key panels over [from, to],
// through the queries the dashboard itself runs, and fails the test if
// load, holds or rows are missing.
func overviewFromPrometheus(t *testing.T, prom string, from, to time.Time) overview {
	t.Helper()
	exprs := map[string]string{}
	for _, p := range dashboards.Overview().Panels {
		for _, tg := range p.Targets {
			exprs[p.Title+"/"+tg.RefID] = strings.NewReplacer("$cluster", "db1", "$__rate_interval", "5s").Replace(tg.Expr)
		}
	}
	get := func(key string) string {
		e, ok := exprs[key]
		if !ok {
			t.Fatalf("the overview has no query %q", key)
		}
		return e
	}
	byLabel := func(expr, label string) map[string][]point {
		m := map[string][]point{}
		for _, s := range promRange(t, prom, expr, from, to) {
			m[s.labels[label]] = append(m[s.labels[label]], s.points...)
		}
		return m
	}
	one := func(expr string) []point {
		var pts []point
		for _, s := range promRange(t, prom, expr, from, to) {
			pts = append(pts, s.points...)
		}
		return pts
	}
	o := overview{
		Load:          one(get("Primary load (on-CPU sessions per core)/A")),
		Budget:        one(get("Background budget and job rates/A")),
		JobRates:      byLabel(get("Background budget and job rates/B"), "throttled_job"),
		RowsPerSecond: byLabel(get("Rows per second, by job/A"), "throttled_job"),
		Headroom:      one(get("Connection headroom (free client slots)/A")),
		Lag:           byLabel(get("Replica lag/A"), "replica"),
		Mode:          byLabel(get("Mode/A"), "mode"),
	}
	holdPoints := 0
	for _, a := range dashboards.Overview().Annotations.List {
		if !strings.Contains(a.Expr, "throttled_holds_info") {
			continue
		}
		for _, s := range promRange(t, prom, strings.ReplaceAll(a.Expr, "$cluster", "db1"), from, to) {
			o.Holds = append(o.Holds, s)
			for _, p := range s.points {
				if p.V != 0 { // 1 while the hold is active
					holdPoints++
				}
			}
		}
	}
	if len(o.Load) == 0 || holdPoints == 0 || len(o.RowsPerSecond) == 0 {
		t.Fatalf("the plot would lack load (%d samples), holds (%d active samples) or rows (%d jobs)", len(o.Load), holdPoints, len(o.RowsPerSecond))
	}
	return o
}
