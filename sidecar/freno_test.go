package sidecar_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
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

	pgtest.Eventually(t, 20*time.Second, func() error {
		for _, path := range []string{"/check/a", "/check/a/mysql/main"} {
			if code := ghostCheck(t, hs.URL+path); code != http.StatusOK {
				return fmt.Errorf("HEAD %s = %d, want 200", path, code)
			}
		}
		return nil
	})
	resp, err := http.Get(hs.URL + "/check/a/mysql/main")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
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
