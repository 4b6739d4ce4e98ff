package sidecar_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

// get asks method url with token ("" for none) and returns the status,
// Retry-After and body.
func get(t *testing.T, method, url, token string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// With open_checks, a caller without a token learns from /check what
// freno's open check says (go or wait, in closed words) and nothing that
// /v1/holds refuses it: no hold ID, no token name, no reason, no expiry;
// at our path and freno's, GET and HEAD. A caller with a read token still
// gets the whole answer. On the old code the token-less answer carried the
// job's reason: "paused: hold h1 on job:a by oncall (manual): ...".
func TestOpenCheckSaysOnlyGoOrWait(t *testing.T) {
	client, _ := coordinatedClient(t)
	cfg := configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10})
	cfg.OpenReads, cfg.OpenChecks = false, true
	cfg.HoldTTL = hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}
	cfg.Tokens = []config.Token{{Name: "viewer", Secret: admitRead, Scopes: []config.Scope{config.ScopeRead}},
		{Name: "oncall-secret-name", Secret: admitPause, Scopes: []config.Scope{config.ScopePause}}}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	waitReady(t, hs.URL)
	paths := []string{"/check/a", "/check/a/mysql/main"}

	// Go: 200 and the closed words. Each 200 takes a token of the job's
	// 10/s, so each path is asked until it has one.
	for _, p := range paths {
		var body string
		pgtest.Eventually(t, 20*time.Second, func() error {
			var code int
			if code, _, body = get(t, "GET", hs.URL+p, ""); code != http.StatusOK {
				return fmt.Errorf("GET %s = %d %s, want 200", p, code, body)
			}
			return nil
		})
		if !strings.Contains(body, `"state":"go"`) || strings.Contains(body, "budget") {
			t.Errorf("go without a token = %s; want state go and no reason", body)
		}
	}

	const reason = "vacuum the orders table before the sale"
	if code, _, _ := get(t, "GET", hs.URL+"/v1/holds", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /v1/holds without a token = %d, want 401", code)
	}
	req, _ := http.NewRequest("POST", hs.URL+"/v1/holds", strings.NewReader(`{"scope":"job:a","ttl":"30m","reason":"`+reason+`"}`))
	req.Header.Set("Authorization", "Bearer "+admitPause)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var hold api.Hold
	if err := json.NewDecoder(resp.Body).Decode(&hold); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("pause: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	// The pair outlives the test: the next test's job a must not be held.
	defer func() {
		if code, body := probe(t, "DELETE", hs.URL+"/v1/holds/"+hold.ID+"?reason=done", admitPause, ""); code != http.StatusOK {
			t.Errorf("release %s: %d %s", hold.ID, code, body)
		}
	}()

	// Held: 417 with Retry-After, and nothing of the hold.
	pgtest.Eventually(t, 10*time.Second, func() error {
		if code, _, body := get(t, "GET", hs.URL+"/check/a", ""); code != http.StatusExpectationFailed {
			return fmt.Errorf("held: GET /check/a = %d %s, want 417", code, body)
		}
		return nil
	})
	secrets := []string{hold.ID, "oncall-secret-name", reason, "vacuum", hold.Expires.UTC().Format("2006-01-02"), "hold"}
	for _, p := range paths {
		code, retry, body := get(t, "GET", hs.URL+p, "")
		if code != http.StatusExpectationFailed || retry != "1" {
			t.Errorf("GET %s without a token = %d, Retry-After %q; want 417 and 1", p, code, retry)
		}
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("GET %s without a token answers %s: it carries %q", p, body, s)
			}
		}
		var keys map[string]any
		if err := json.Unmarshal([]byte(body), &keys); err != nil {
			t.Fatalf("GET %s: %v: %s", p, err, body)
		}
		if got, want := slices.Sorted(maps.Keys(keys)), []string{"Message", "StatusCode", "code", "job", "state"}; !slices.Equal(got, want) {
			t.Errorf("GET %s without a token has keys %v, want %v", p, got, want)
		}
		if keys["job"] != "a" || keys["state"] != "paused" || keys["code"] != "held" || keys["StatusCode"] != float64(417) {
			t.Errorf("GET %s without a token = %s; want job a, paused, held, 417", p, body)
		}
		if code, retry, body := get(t, "HEAD", hs.URL+p, ""); code != http.StatusExpectationFailed || retry != "1" || body != "" {
			t.Errorf("HEAD %s without a token = %d, Retry-After %q, body %q", p, code, retry, body)
		}
		// The same caller with a read token gets the whole answer.
		if code, _, body := get(t, "GET", hs.URL+p, admitRead); code != http.StatusExpectationFailed ||
			!strings.Contains(body, hold.ID) || !strings.Contains(body, reason) || !strings.Contains(body, `"Threshold"`) {
			t.Errorf("GET %s with a read token = %d %s; want 417 with the hold and its reason", p, code, body)
		}
	}
	// An unknown job is 404 in the same closed words.
	if code, _, body := get(t, "GET", hs.URL+"/check/nope/mysql/main", ""); code != http.StatusNotFound || !strings.Contains(body, `"code":"unknown_job"`) {
		t.Errorf("unknown job without a token: %d %s", code, body)
	}
	// A wrong token is still refused, not taken for none.
	if code, _, _ := get(t, "GET", hs.URL+"/check/a", "not-a-token-at-all"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token = %d, want 401", code)
	}
}
