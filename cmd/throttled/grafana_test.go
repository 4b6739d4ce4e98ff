package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
)

const grafanaSecret = "grafana-webhook-secret-0123456789"

// grafanaNotification is Grafana Alerting's webhook body for one alert.
func grafanaNotification(status, fingerprint, job string, starts, ends time.Time) []byte {
	alert := map[string]any{"status": status, "fingerprint": fingerprint,
		"labels":      map[string]string{"alertname": "PrimaryHot", "throttled_job": job},
		"annotations": map[string]string{"summary": "primary CPU above 80% for 5m"},
		"startsAt":    starts.UTC().Format(time.RFC3339), "endsAt": ends.UTC().Format(time.RFC3339),
		"generatorURL": "http://grafana.invalid/alerting/grafana/abc/view"}
	b, _ := json.Marshal(map[string]any{"receiver": "throttled", "status": status, "orgId": 1, "alerts": []any{alert},
		"groupLabels": map[string]string{}, "commonLabels": map[string]string{"alertname": "PrimaryHot"}, "version": "1",
		"groupKey": "{}:{alertname=\"PrimaryHot\"}", "externalURL": "http://grafana.invalid/"})
	return b
}

func TestGrafanaWebhook(t *testing.T) {
	c := pgtest.Cluster(t)
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	t.Setenv("THROTTLED_GRAFANA_SECRET", grafanaSecret)
	addr := freeAddr(t)
	path := t.TempDir() + "/throttled.hcl"
	// The block the issue requires to work as written.
	writeConfig(t, path, c, addr, "replica1", "grafana {\n  webhook_secret = env(\"THROTTLED_GRAFANA_SECRET\")\n}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--log-level", "off"}, io.Discard, io.Discard)
	}()
	base := "http://" + addr
	waitReady(t, base, 20*time.Second)
	a := sidecarAPI{t: t, base: base}

	send := func(body []byte, sign bool, ts time.Time) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/hooks/grafana", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if sign {
			stamp := strconv.FormatInt(ts.Unix(), 10)
			req.Header.Set("X-Grafana-Alerting-Timestamp", stamp)
			req.Header.Set("X-Grafana-Alerting-Signature", sidecar.GrafanaSignature(grafanaSecret, stamp, body))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	holdsOf := func() []any {
		_, _, list := a.do("GET", "/v1/holds", viewerToken, nil)
		var g []any
		for _, h := range list {
			if h.(map[string]any)["source"] == "grafana-alert" {
				g = append(g, h)
			}
		}
		return g
	}
	now := time.Now()
	starts := now.Add(-time.Minute)
	firing := grafanaNotification("firing", "fp-1", "purge", starts, time.Time{})

	// Refused: no signature, a bad one, a stale timestamp.
	if code, _ := send(firing, false, now); code != 401 {
		t.Fatalf("unsigned: %d", code)
	}
	bad := bytes.Replace(firing, []byte("purge"), []byte("purgf"), 1)
	req, _ := http.NewRequest("POST", base+"/v1/hooks/grafana", bytes.NewReader(bad))
	stamp := strconv.FormatInt(now.Unix(), 10)
	req.Header.Set("X-Grafana-Alerting-Timestamp", stamp)
	req.Header.Set("X-Grafana-Alerting-Signature", sidecar.GrafanaSignature(grafanaSecret, stamp, firing)) // signs another body
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 401 {
		t.Fatalf("bad signature: %d", resp.StatusCode)
	}
	if code, body := send(firing, true, now.Add(-10*time.Minute)); code != 401 || !strings.Contains(fmt.Sprint(body["error"]), "replay window") {
		t.Fatalf("stale timestamp: %d %v", code, body)
	}
	if len(holdsOf()) != 0 {
		t.Fatal("a refused notification made a hold")
	}

	// A notification with one bad alert (an invalid job name) is refused
	// whole: its good alert makes no hold either.
	var two map[string]any
	json.Unmarshal(grafanaNotification("firing", "fp-good", "purge", starts, time.Time{}), &two)
	var badAlert map[string]any
	json.Unmarshal(grafanaNotification("firing", "fp-bad", "Not A Job!", starts, time.Time{}), &badAlert)
	two["alerts"] = append(two["alerts"].([]any), badAlert["alerts"].([]any)...)
	mixed, _ := json.Marshal(two)
	if code, body := send(mixed, true, now); code != 400 || !strings.Contains(fmt.Sprint(body["error"]), "alerts[1]") {
		t.Fatalf("a notification with a bad alert: %d %v", code, body)
	}
	if len(holdsOf()) != 0 {
		t.Fatal("a refused notification applied its good alert")
	}

	// Firing holds the labelled job; a replay renews, never adds.
	if code, body := send(firing, true, now); code != 200 || body["added"] != 1.0 {
		t.Fatalf("firing: %d %v", code, body)
	}
	if code, body := send(firing, true, now); code != 200 || body["renewed"] != 1.0 {
		t.Fatalf("replayed firing: %d %v", code, body)
	}
	hs := holdsOf()
	if len(hs) != 1 || hs[0].(map[string]any)["scope"] != "job:purge" || !strings.Contains(hs[0].(map[string]any)["actor"].(string), "PrimaryHot") {
		t.Fatalf("holds %v", hs)
	}
	pgtest.Eventually(t, 3*time.Second, func() error {
		if code, _, _ := a.do("GET", "/check/purge", viewerToken, nil); code != 417 {
			return fmt.Errorf("check %d while the alert fires", code)
		}
		return nil
	})

	// Resolved releases exactly that hold; a late firing of the same alert
	// (delivered out of order) adds nothing.
	if code, body := send(grafanaNotification("resolved", "fp-1", "purge", starts, now), true, now); code != 200 || body["released"] != 1.0 {
		t.Fatalf("resolved: %d %v", code, body)
	}
	if len(holdsOf()) != 0 {
		t.Fatal("the hold survived its resolve")
	}
	if code, body := send(firing, true, now); code != 200 || body["ignored"] != 1.0 || len(holdsOf()) != 0 {
		t.Fatalf("late firing: %d %v", code, body)
	}
	// A person's hold is untouched by a Grafana resolve.
	cli(t, "pause", "--primary-dsn", c.Primary.DSN("postgres"), "--job", "purge", "--reason", "a person's hold", "--ttl", "5m")
	send(grafanaNotification("resolved", "fp-2", "purge", starts, now), true, now)
	_, _, list := a.do("GET", "/v1/holds", viewerToken, nil)
	if len(list) != 1 {
		t.Fatalf("a Grafana resolve touched a person's hold: %v", list)
	}
	cli(t, "resume", "--primary-dsn", c.Primary.DSN("postgres"), "--job", "purge")
	// A bearer token with the pause scope is accepted too.
	req, _ = http.NewRequest("POST", base+"/v1/hooks/grafana", bytes.NewReader(grafanaNotification("firing", "fp-3", "purge", now, time.Time{})))
	req.Header.Set("Authorization", "Bearer "+opsToken)
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 200 {
		t.Fatalf("bearer: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", base+"/v1/hooks/grafana", bytes.NewReader(grafanaNotification("resolved", "fp-3", "purge", now, now)))
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 401 {
		t.Fatalf("read-only bearer: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", base+"/v1/hooks/grafana", bytes.NewReader(grafanaNotification("resolved", "fp-3", "purge", now, now)))
	req.Header.Set("Authorization", "Bearer "+opsToken)
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 200 || len(holdsOf()) != 0 {
		t.Fatalf("resolve with the pause token: %d, holds %v", resp.StatusCode, holdsOf())
	}
	cancel()
	<-done
}
