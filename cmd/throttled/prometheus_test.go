package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/dashboards"
	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/remote"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
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
	writeConfig(t, path, c, addr, "replica1", "")
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
	rj, err := jobs.New(jobs.Config{Name: "purge"}, db, rc.Pacer("purge"), func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
		n++
		if n == 3 {
			return jobs.Result{}, fmt.Errorf("scripted failure")
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(0.01)")
		return jobs.Result{Rows: 10, Done: n >= 40}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go rj.Run(workCtx)
	a := api{t: t, base: base}
	code, hold, _ := a.do("POST", "/v1/holds", opsToken, sidecar.PauseRequest{Scope: "job:archive", Reason: "dashboard test", TTL: "10m"})
	if code != 201 {
		t.Fatalf("pause: %d", code)
	}
	// The pair is shared: leave no hold behind for the next test (a defer,
	// so it runs while the sidecar still serves).
	defer func() {
		if code, _, _ := a.do("DELETE", fmt.Sprintf("/v1/holds/%v", hold["id"]), opsToken, nil); code != 200 {
			t.Errorf("release the dashboard test's hold %v: %d", hold["id"], code)
		}
	}()

	type query struct{ where, expr string }
	var queries []query
	for file, d := range dashboards.All() {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				expr := strings.NewReplacer("$cluster", "db1", "$__rate_interval", "20s").Replace(tg.Expr)
				queries = append(queries, query{fmt.Sprintf("%s: %q %s", file, p.Title, tg.RefID), expr})
			}
		}
	}
	sort.Slice(queries, func(i, j int) bool { return queries[i].where < queries[j].where })
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
}
