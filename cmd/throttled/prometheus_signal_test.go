package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled/dashboards"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/internal/testenv/promtest"
	"github.com/throttled/throttled/sidecar/api"
)

// appExporter is an application's metrics as a test sets them:
// app_p99_seconds and app_error_rate, each one series, stamped with their
// own time, which freeze stops for app_p99_seconds (the data age, and Prometheus keeps
// answering with the last sample: no stale marker follows a sample that
// carries its own time); app_pair, two series.
type appExporter struct {
	mu       sync.Mutex
	p99, err float64
	frozen   time.Time
	exp      *promtest.Exporter
}

var (
	appP99Desc  = prometheus.NewDesc("app_p99_seconds", "the application's p99", nil, nil)
	appErrDesc  = prometheus.NewDesc("app_error_rate", "the application's error rate", nil, nil)
	appPairDesc = prometheus.NewDesc("app_pair", "two series", []string{"x"}, nil)
)

func newAppExporter(t *testing.T) *appExporter {
	a := &appExporter{p99: 0.05, err: 0.01}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a)
	a.exp = promtest.Export(t, reg)
	return a
}

func (a *appExporter) Describe(ch chan<- *prometheus.Desc) {
	ch <- appP99Desc
	ch <- appErrDesc
	ch <- appPairDesc
}

func (a *appExporter) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now, at := time.Now(), time.Now()
	if !a.frozen.IsZero() {
		at = a.frozen
	}
	ch <- prometheus.NewMetricWithTimestamp(at, prometheus.MustNewConstMetric(appP99Desc, prometheus.GaugeValue, a.p99))
	ch <- prometheus.NewMetricWithTimestamp(now, prometheus.MustNewConstMetric(appErrDesc, prometheus.GaugeValue, a.err))
	ch <- prometheus.MustNewConstMetric(appPairDesc, prometheus.GaugeValue, 1, "a")
	ch <- prometheus.MustNewConstMetric(appPairDesc, prometheus.GaugeValue, 2, "b")
}

func (a *appExporter) setErrorRate(v float64) { a.mu.Lock(); a.err = v; a.mu.Unlock() }

// freeze stops app_p99_seconds' time (true) or lets it run again.
func (a *appExporter) freeze(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.frozen = time.Time{}
	if on {
		a.frozen = time.Now()
	}
}

// startApp runs an application exporter and a real Prometheus scraping
// it, and waits for its series.
func startApp(t *testing.T, o promtest.Options) (*appExporter, *promtest.Server) {
	t.Helper()
	a := newAppExporter(t)
	o.Targets = []string{a.exp.Addr}
	prom := promtest.Start(t, o)
	if !o.BasicAuth {
		prom.WaitSeries(t, "app_p99_seconds", 1, 30*time.Second)
	}
	return a, prom
}

// promHCL is a prometheus block at address (auth its credential lines)
// with api_p99 (job-free baseline) on query and api_errors (an absolute
// target); it is writeConfig's extra, whose first line is promHCLLine.
func promHCL(address, auth, query string) string {
	return fmt.Sprintf(`prometheus {
  address = %q
  timeout = "1s"
%s}
prometheus_signal "api_p99" {
  query = %q
  unit  = "seconds"
  delay = "2s"
}
signal "api_p99" {
  target  = 1.5
  max_age = "5s"
}
prometheus_signal "api_errors" {
  query = "max(app_error_rate)"
}
signal "api_errors" {
  target   = 0.05
  baseline = "none"
  max_age  = "5s"
}
`, address, auth, query)
}

// promSignalLine is the line of api_p99's block in a file writeConfig
// wrote with promHCL as its extra (auth of n lines).
func promSignalLine(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, _, ok := strings.Cut(string(b), `prometheus_signal "api_p99"`)
	if !ok {
		t.Fatal("no api_p99 block")
	}
	return strings.Count(before, "\n") + 1
}

// startRun runs `throttled run` on path until the test ends, its log at
// debug into the returned buffer, and waits until it serves.
func startRun(t *testing.T, path, addr string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "--config", path, "--log-level", "debug"}, logs, logs) }()
	t.Cleanup(func() { cancel(); <-done })
	waitReady(t, "http://"+addr, 30*time.Second)
	return logs
}

// syncBuffer is a bytes.Buffer safe for the daemon's writers and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func setTokens(t *testing.T) {
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
}

// statusText is `throttled status --addr`'s output, and its --json.
func statusText(t *testing.T, addr string) (text, js string) {
	t.Helper()
	t.Setenv("THROTTLED_TOKEN", viewerToken)
	for _, jsonFlag := range []bool{false, true} {
		args := []string{"status", "--addr", "http://" + addr}
		if jsonFlag {
			args = append(args, "--json")
		}
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != exitOK {
			t.Fatalf("status: exit %d: %s", code, errOut.String())
		}
		if jsonFlag {
			js = out.String()
		} else {
			text = out.String()
		}
	}
	return text, js
}

// promLabels runs an instant query and returns each series' signal label.
func promLabels(base, expr string) ([]string, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Status, Error string
		Data          struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, out.Error)
	}
	var names []string
	for _, r := range out.Data.Result {
		names = append(names, r.Metric["signal"])
	}
	return names, nil
}

// The overview's Prometheus-signal panels show every Prometheus signal of
// the configuration by its name, whatever it is: a real throttled run
// reading two of them from a real Prometheus, scraped by another with the
// cluster label, and each panel's query run there. Then the error rate
// climbs over its target, and a job it limits counts its time under the
// signal's name in throttled_jobs_limited_seconds_total.
func TestDashboardShowsPrometheusSignals(t *testing.T) {
	c := pgtest.Cluster(t)
	setTokens(t)
	app, appProm := startApp(t, promtest.Options{})
	addr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "throttled.hcl")
	writeConfig(t, path, c, addr, "replica1", promHCL(appProm.URL, "", "max(app_p99_seconds)"))
	startRun(t, path, addr)
	prom := startPrometheus(t, addr)

	want := map[string][]string{"job-free": {"api_p99"}, "none": {"api_errors"}, "": {"api_errors", "api_p99"}}
	vars := strings.NewReplacer("$cluster", "db1", "$__rate_interval", "20s", "$__range", "5m")
	n := 0
	for _, p := range dashboards.Overview().Panels {
		for _, tg := range p.Targets {
			kind := ""
			switch {
			case strings.Contains(tg.Expr, `baseline="job-free"`), strings.Contains(tg.Expr, "throttled_signals_baseline"):
				kind = "job-free"
			case strings.Contains(tg.Expr, `baseline="none"`):
				kind = "none"
			case !strings.Contains(tg.Expr, "throttled_signals_prometheus_info"):
				continue
			}
			n++
			expr := vars.Replace(tg.Expr)
			pgtest.Eventually(t, 60*time.Second, func() error {
				got, err := promLabels(prom, expr)
				if err != nil {
					return err
				}
				for _, s := range want[kind] {
					if !slices.Contains(got, s) {
						return fmt.Errorf("panel %q %s: %s gives signals %v; %s is missing", p.Title, tg.RefID, expr, got, s)
					}
				}
				return nil
			})
		}
	}
	if n < 5 {
		t.Fatalf("%d queries of the overview select Prometheus signals; want their value, reading, baseline, age and blindness", n)
	}
	// Over its target, the error rate limits the job: its time counts
	// under the signal's name, in the sidecar's scrape and through
	// Prometheus, and none of it under other.
	app.setErrorRate(0.2)
	secs := func(why string) float64 {
		re := regexp.MustCompile(`(?m)^throttled_jobs_limited_seconds_total\{throttled_job="purge",why="` + why + `"\} (\S+)$`)
		m := re.FindStringSubmatch(get(t, addr, "/metrics"))
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	pgtest.Eventually(t, 60*time.Second, func() error {
		if got := secs("api_errors"); got < 1 {
			return fmt.Errorf("purge limited by api_errors for %.1f s; waiting for 1", got)
		}
		return nil
	})
	other, limitedBy := secs("other"), secs("api_errors")
	pgtest.Eventually(t, 60*time.Second, func() error {
		if got := secs("api_errors"); got < limitedBy+3 {
			return fmt.Errorf("purge limited by api_errors for %.1f s; waiting for %.1f", got, limitedBy+3)
		}
		return nil
	})
	if got := secs("other"); got != other {
		t.Errorf("while api_errors bound, purge's time under other went from %.1f s to %.1f s", other, got)
	}
	limited := `sum(throttled_jobs_limited_seconds_total{why="api_errors",throttled_job="purge",cluster="db1"})`
	pgtest.Eventually(t, 30*time.Second, func() error {
		if got, err := promSeries(prom, limited+" > 1"); err != nil || got == 0 {
			return fmt.Errorf("%s not yet over 1 s in Prometheus (%v)", limited, err)
		}
		return nil
	})
}

// cmdResult is one command's exit code and its output, both streams.
type cmdResult struct {
	code int
	out  string
}

// runCmd runs the CLI with args for at most a minute (a `run` that
// wrongly starts is stopped there, and the test fails on its code).
func runCmd(args ...string) cmdResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out syncBuffer
	code := run(ctx, args, &out, &out)
	return cmdResult{code, out.String()}
}

// check-config --live, run and signals --config read each Prometheus
// query once against a real Prometheus and refuse the file as the sampler
// would fail the sample: naming the signal and its file:line, with the
// series count, or Prometheus's own words for a syntax error.
func TestCommandsRefuseAPrometheusSignal(t *testing.T) {
	c := pgtest.Cluster(t)
	setTokens(t)
	_, prom := startApp(t, promtest.Options{})
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"two series", "app_pair", []string{"2 series, want one"}},
		// Prometheus's words: "1:12: parse error: unclosed left parenthesis".
		{"syntax error", "sum(app_pair", []string{"Prometheus refused it", "parse error", "unclosed left parenthesis"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			path := filepath.Join(t.TempDir(), "throttled.hcl")
			writeConfig(t, path, c, addr, "replica1", promHCL(prom.URL, "", tc.query))
			where := fmt.Sprintf(`prometheus signal "api_p99" (%s:%d)`, path, promSignalLine(t, path))
			for _, args := range [][]string{
				{"check-config", "--live", "--config", path},
				{"run", "--config", path, "--log-level", "info"},
				{"signals", "--config", path},
			} {
				r := runCmd(args...)
				if r.code == exitOK {
					t.Errorf("%s: exit 0, want a refusal:\n%s", args[0], r.out)
					continue
				}
				for _, w := range append([]string{where}, tc.want...) {
					if !strings.Contains(r.out, w) {
						t.Errorf("%s: exit %d, output does not say %q:\n%s", args[0], r.code, w, r.out)
					}
				}
			}
			// The file's other signal is fine: only the broken one is named.
			if r := runCmd("check-config", "--live", "--config", path); strings.Contains(r.out, `"api_errors"`) {
				t.Errorf("check-config names api_errors, which reads one series:\n%s", r.out)
			}
		})
	}
	t.Run("a good file passes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "throttled.hcl")
		writeConfig(t, path, c, freeAddr(t), "replica1", promHCL(prom.URL, "", "max(app_p99_seconds)"))
		if r := runCmd("check-config", "--live", "--config", path); r.code != exitOK {
			t.Fatalf("check-config --live: exit %d:\n%s", r.code, r.out)
		}
	})
}

// get is a sidecar's answer to GET path with the viewer token.
func get(t *testing.T, addr, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

// The bearer token and the basic-auth password are never shown: not in a
// refusal of check-config --live, run or signals --config when a real
// Prometheus refuses them (401), and, once it accepts them, in no log
// line of `throttled run` at debug, `throttled status` (text or JSON),
// the API's status, jobs and the /metrics scrape, before and after
// Prometheus starts refusing them (its users rotated).
func TestPrometheusCredentialsAreNeverShown(t *testing.T) {
	c := pgtest.Cluster(t)
	setTokens(t)
	const token, wrong = "tok-5e1c9a7b3d2f4068", "wrong-8d3b1f6a2c9e"
	secrets := []string{token, wrong, promtest.BasicPassword}
	shows := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows the secret %q:\n%s", where, s, text)
			}
		}
	}
	_, prom := startApp(t, promtest.Options{BasicAuth: true})
	t.Setenv("THROTTLED_TEST_PROM_TOKEN", token)
	for _, tc := range []struct{ name, auth, pass, want string }{
		{"bearer token", "  bearer_token = env(\"THROTTLED_TEST_PROM_TOKEN\")\n", "", "the bearer token was sent (not shown)"},
		{"wrong password", "  basic_user = \"throttled\"\n  basic_password = env(\"THROTTLED_TEST_PROM_PASS\")\n", wrong, `basic auth as "throttled" was sent (the password is not shown)`},
	} {
		t.Run(tc.name+" refused", func(t *testing.T) {
			t.Setenv("THROTTLED_TEST_PROM_PASS", tc.pass)
			path := filepath.Join(t.TempDir(), "throttled.hcl")
			writeConfig(t, path, c, freeAddr(t), "replica1", promHCL(prom.URL, tc.auth, "max(app_p99_seconds)"))
			for _, args := range [][]string{
				{"check-config", "--live", "--config", path},
				{"run", "--config", path, "--log-level", "debug"},
				{"signals", "--config", path},
			} {
				r := runCmd(args...)
				if r.code == exitOK || !strings.Contains(r.out, "401 Unauthorized") || !strings.Contains(r.out, tc.want) {
					t.Errorf("%s: exit %d; want a refusal saying 401 Unauthorized and %q:\n%s", args[0], r.code, tc.want, r.out)
				}
				shows(args[0], r.out)
			}
		})
	}
	t.Run("accepted, then refused", func(t *testing.T) {
		t.Setenv("THROTTLED_TEST_PROM_PASS", promtest.BasicPassword)
		addr := freeAddr(t)
		path := filepath.Join(t.TempDir(), "throttled.hcl")
		writeConfig(t, path, c, addr, "replica1", promHCL(prom.URL, "  basic_user = \"throttled\"\n  basic_password = env(\"THROTTLED_TEST_PROM_PASS\")\n", "max(app_p99_seconds)"))
		if r := runCmd("check-config", "--live", "--config", path); r.code != exitOK {
			t.Fatalf("check-config --live with the right password: exit %d:\n%s", r.code, r.out)
		}
		logs := startRun(t, path, addr)
		everywhere := func(when string) {
			text, js := statusText(t, addr)
			shows(when+": status", text)
			shows(when+": status --json", js)
			shows(when+": GET /v1/jobs", get(t, addr, "/v1/jobs"))
			shows(when+": GET /metrics", get(t, addr, "/metrics"))
			shows(when+": the log", logs.String())
		}
		// Read: the error rate's value is in the metrics.
		pgtest.Eventually(t, 30*time.Second, func() error {
			if m := get(t, addr, "/metrics"); !strings.Contains(m, `throttled_signals_value{replica="",signal="api_errors"} 0.01`) {
				return fmt.Errorf("api_errors not read yet")
			}
			return nil
		})
		everywhere("accepted")
		prom.RotateBasicAuth(t)
		pgtest.Eventually(t, 30*time.Second, func() error {
			if text, _ := statusText(t, addr); !strings.Contains(text, "api_errors") || !strings.Contains(text, "credentials refused") ||
				!strings.Contains(text, `basic auth as "throttled" was sent (the password is not shown)`) {
				return fmt.Errorf("status does not say the credentials are refused yet:\n%s", text)
			}
			return nil
		})
		everywhere("refused")
	})
}

// When a Prometheus signal is blind, `throttled status` and the page say
// which signal and why: its data stopped (stale by the sample's own
// timestamp: the page reaches a real Alertmanager, and resolves once the
// data flow again), Prometheus hung (a timeout), Prometheus down
// (unreachable).
func TestBlindPrometheusSignalInStatusAndPage(t *testing.T) {
	c := pgtest.Cluster(t)
	setTokens(t)
	am := startAlertmanager(t)
	app, prom := startApp(t, promtest.Options{})
	addr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "throttled.hcl")
	writeConfig(t, path, c, addr, "replica1", promHCL(prom.URL, "", "max(app_p99_seconds)")+
		fmt.Sprintf("notifier \"alertmanager\" {\n  url = %q\n}\ncluster = \"db-blind\"\n", am))
	startRun(t, path, addr)
	// status waits until `throttled status` and its --json (the API's
	// status) say mode, and the reason each of why.
	status := func(mode string, why ...string) {
		t.Helper()
		pgtest.Eventually(t, 45*time.Second, func() error {
			text, js := statusText(t, addr)
			var st api.Status
			if err := json.Unmarshal([]byte(js), &st); err != nil {
				return fmt.Errorf("status --json: %v: %s", err, js)
			}
			if !strings.Contains(text, "mode: "+mode) || st.Mode != mode {
				return fmt.Errorf("status is not %s yet:\n%s", mode, text)
			}
			for _, w := range why {
				if !strings.Contains(text, w) || !strings.Contains(st.Reason, w) {
					return fmt.Errorf("status does not say %q yet:\n%s", w, text)
				}
			}
			return nil
		})
	}
	status("running")

	app.freeze(true)
	status("stale", "stale: api_p99 (age ", "over max_age 5s)")
	var alert map[string]any
	pgtest.Eventually(t, 60*time.Second, func() error {
		alerts, err := activeAlerts(am, "ThrottledStale")
		if err == nil && len(alerts) == 0 {
			err = fmt.Errorf("no ThrottledStale alert yet")
		}
		if err == nil {
			alert = alerts[0]
		}
		return err
	})
	labels, annotations := alert["labels"].(map[string]any), alert["annotations"].(map[string]any)
	summary, _ := annotations["summary"].(string)
	if labels["signal"] != "api_p99" || labels["cluster"] != "db-blind" || !strings.Contains(summary, "api_p99 (age ") || !strings.Contains(summary, "over max_age 5s") {
		t.Fatalf("alert labels %v, summary %q: want signal api_p99 and why (its data's age over max_age)", labels, summary)
	}
	app.freeze(false)
	status("running")
	pgtest.Eventually(t, 30*time.Second, func() error {
		alerts, err := activeAlerts(am, "ThrottledStale")
		if err == nil && len(alerts) > 0 {
			err = fmt.Errorf("ThrottledStale still active: %v", alerts[0]["annotations"])
		}
		return err
	})

	// A hung Prometheus: each query runs out of its timeout.
	prom.Hang(t)
	status("stale", `api_p99 (error: prometheus signal "api_p99"`, "timed out after 1s")
	prom.Resume(t)
	status("running")

	prom.Stop()
	status("stale", `api_p99 (error: prometheus signal "api_p99"`, "unreachable")
}
