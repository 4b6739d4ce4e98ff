package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// startAlertmanager runs a real Alertmanager on a free loopback port and
// returns its base URL.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		if bin, err = exec.LookPath("alertmanager"); err != nil {
			t.Fatal("alertmanager is not installed; run `make deps`")
		}
	}
	dir := t.TempDir()
	cfg := dir + "/alertmanager.yml"
	if err := os.WriteFile(cfg, []byte("route:\n  receiver: none\n  group_wait: 0s\nreceivers:\n  - name: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.path="+dir, "--web.listen-address="+addr, "--cluster.listen-address=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	pgtest.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get(base + "/api/v2/status")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	return base
}

// activeAlerts lists Alertmanager's active alerts named name.
func activeAlerts(am, name string) ([]map[string]any, error) {
	resp, err := http.Get(am + "/api/v2/alerts?active=true&filter=alertname%3D%22" + name + "%22")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var alerts []map[string]any
	return alerts, json.Unmarshal(raw, &alerts)
}

// TestCriticalLoadPagesAlertmanagerAndResolves drives primary_load over
// critical with the harness's busy sessions: a real Alertmanager receives
// the page, and the resolve once the load ends and the quiet period
// passes.
func TestCriticalLoadPagesAlertmanagerAndResolves(t *testing.T) {
	c := pgtest.Cluster(t)
	am := startAlertmanager(t)
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	addr := freeAddr(t)
	path := t.TempDir() + "/throttled.hcl"
	writeConfig(t, path, c, addr, "replica1", fmt.Sprintf("notifier \"alertmanager\" {\n  url = %q\n}\ncluster = \"db-test\"\ndashboard_url = \"http://grafana.invalid/d/throttled\"\n", am))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--log-level", "off"}, io.Discard, io.Discard)
	}()
	waitReady(t, "http://"+addr, 20*time.Second)
	load, err := c.CPULoad(context.Background(), 2, 2*time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	var alert map[string]any
	pgtest.Eventually(t, 20*time.Second, func() error {
		alerts, err := activeAlerts(am, "ThrottledCritical")
		if err == nil && len(alerts) == 0 {
			err = fmt.Errorf("no ThrottledCritical alert yet")
		}
		if err == nil {
			alert = alerts[0]
		}
		return err
	})
	labels, annotations := alert["labels"].(map[string]any), alert["annotations"].(map[string]any)
	if labels["cluster"] != "db-test" || labels["signal"] != "primary_load" || annotations["dashboard"] != "http://grafana.invalid/d/throttled" ||
		annotations["threshold"] != "1" {
		t.Fatalf("alert %v", alert)
	}
	if err := load.Stop(); err != nil {
		t.Fatal(err)
	}
	// The configuration's quiet period is 3 s: the resolve follows it.
	pgtest.Eventually(t, 30*time.Second, func() error {
		alerts, err := activeAlerts(am, "ThrottledCritical")
		if err == nil && len(alerts) > 0 {
			err = fmt.Errorf("still active: %v", alerts[0]["status"])
		}
		return err
	})
	cancel()
	<-done
}
