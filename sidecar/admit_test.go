package sidecar_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

const (
	admitRead   = "read-token-0123456789abcdef"
	admitPause  = "pause-token-0123456789abcdef"
	admitSecret = "grafana-secret-0123456789abcdef"
	admitWork   = "work-token-0123456789abcdef-2"
)

// admitServer runs a sidecar with a small concurrency limit, a read and a
// pause token and a Grafana webhook secret, as an operator would set it.
func admitServer(t *testing.T, openReads bool) *httptest.Server {
	t.Helper()
	client, _ := coordinatedClient(t)
	cfg := configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10})
	cfg.MaxConcurrent, cfg.OpenReads = 8, openReads
	cfg.Tokens = []config.Token{{Name: "viewer", Secret: admitRead, Scopes: []config.Scope{config.ScopeRead}},
		{Name: "oncall", Secret: admitPause, Scopes: []config.Scope{config.ScopePause}},
		{Name: "worker", Secret: admitWork, Scopes: []config.Scope{config.ScopeWork}}}
	cfg.Grafana = config.Grafana{WebhookSecret: admitSecret, SignatureHeader: "X-Grafana-Alerting-Signature",
		TimestampHeader: "X-Grafana-Alerting-Timestamp", ReplayWindow: 5 * time.Minute, HoldTTL: time.Hour}
	cfg.HoldTTL = hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// slowCrowd opens n connections, half of them to the Grafana webhook (the
// one route anyone may reach without a token) and half spread over every
// route, each sending
// its headers without a token (for the webhook: a signature and a fresh
// timestamp, the most it can show without the secret), promising a 60000
// byte body and sending one byte of it; every fifth never finishes its
// headers. They stay open until the test ends.
func slowCrowd(t *testing.T, base string, n int) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	routes := sidecar.Routes()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		r := routes[(i/2)%len(routes)]
		if i%2 == 0 {
			r = sidecar.Route{Name: "grafana", Pattern: "POST /v1/hooks/grafana"}
		}
		method, path, _ := strings.Cut(r.Pattern, " ")
		path = strings.NewReplacer("{job}", "a", "{id}", "h1").Replace(path)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: throttled\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n", method, path)
		if r.Name == "grafana" {
			fmt.Fprintf(&b, "X-Grafana-Alerting-Signature: %s\r\nX-Grafana-Alerting-Timestamp: %d\r\n", strings.Repeat("0", 64), time.Now().Unix())
		}
		if i%5 != 4 {
			b.WriteString("\r\n{")
		}
		if _, err := io.WriteString(c, b.String()); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
}

// probe sends one request with a 3 s deadline and returns its status code
// and body (0 when it got no answer).
func probe(t *testing.T, method, u, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	cl := &http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, u, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		t.Logf("%s %s: %d %s", method, u, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode, string(b)
}

// A crowd must never shed the check or a person's pause. Once, the request
// slot was taken before authentication, and the Grafana webhook read its
// body before checking the signature: 70 anonymous clients trickling a
// body to /v1/hooks/grafana made /check 503 in 68 of 74 probes, /healthz
// 503, and an operator's POST /v1/holds 503 in 14 of 15. Here 200 slow
// anonymous connections sit on every route while /check (read token),
// POST /v1/holds (pause token) and /healthz keep answering, each within
// the probe's 3 s bound; with open_reads too, where anonymous reads have a
// budget of their own.
func TestSlowAnonymousCrowdStarvesNeitherCheckNorPause(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("open_reads=%v", open), func(t *testing.T) { crowdProbe(t, open) })
	}
}

func crowdProbe(t *testing.T, openReads bool) {
	hs := admitServer(t, openReads)
	waitReady(t, hs.URL)
	// Ready, /check answers; the job goes once the foreground-latency
	// canary has its baseline (429 "warming up" for about a second).
	pgtest.Eventually(t, 10*time.Second, func() error {
		if code, body := probe(t, "GET", hs.URL+"/check/a", admitRead, ""); code != http.StatusOK {
			return fmt.Errorf("/check/a = %d %s before the crowd", code, body)
		}
		return nil
	})
	slowCrowd(t, hs.URL, 200)
	var holdIDs []string
	for i := range 15 {
		// 200 before the first probe's hold (or 429: each 200 takes a
		// token of the job's rate), 417 after it.
		if code, body := probe(t, "GET", hs.URL+"/check/a", admitRead, ""); code != http.StatusOK && code != http.StatusTooManyRequests && code != http.StatusExpectationFailed {
			t.Errorf("probe %d: /check/a = %d %s with a read token under the crowd", i, code, body)
		}
		if code, _ := probe(t, "GET", hs.URL+"/healthz", "", ""); code != http.StatusOK {
			t.Errorf("probe %d: /healthz = %d under the crowd", i, code)
		}
		code, body := probe(t, "POST", hs.URL+"/v1/holds", admitPause, `{"scope":"job:a","ttl":"5m","reason":"crowd probe"}`)
		var h struct{ ID string }
		if code != http.StatusCreated || json.Unmarshal([]byte(body), &h) != nil || h.ID == "" {
			t.Errorf("probe %d: POST /v1/holds = %d %s under the crowd", i, code, body)
			continue
		}
		holdIDs = append(holdIDs, h.ID)
	}
	for _, id := range holdIDs {
		if code, _ := probe(t, "DELETE", hs.URL+"/v1/holds/"+id+"?reason=done", admitPause, ""); code != http.StatusOK {
			t.Errorf("release %s = %d", id, code)
		}
	}
	// The webhook's own small budget is what the crowd filled, and the
	// metrics say so.
	_, metrics := probe(t, "GET", hs.URL+"/metrics", admitRead, "")
	if !regexp.MustCompile(`throttled_api_shed_requests_total\{class="hook"\} [1-9]`).MatchString(metrics) ||
		!strings.Contains(metrics, `throttled_api_shed_requests_total{class="check"} 0`) ||
		!strings.Contains(metrics, `throttled_api_shed_requests_total{class="person"} 0`) {
		t.Errorf("want the webhook's budget shed and not the check's or a person's:\n%s", regexp.MustCompile(`(?m)^throttled_api_shed.*$`).FindAllString(metrics, -1))
	}
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, base string) {
	t.Helper()
	pgtest.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("/readyz = %d %s", resp.StatusCode, b)
		}
		return nil
	})
}

// A webhook is refused before its body is read when its headers cannot
// authenticate it: no signature and no token, or a signature with no
// timestamp (which could be replayed forever) unless the operator allows
// it.
func TestGrafanaHookNeedsATimestampedSignature(t *testing.T) {
	hs := admitServer(t, false)
	body := `{"status":"firing","alerts":[]}`
	post := func(h map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", hs.URL+"/v1/hooks/grafana", strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	if code, b := post(map[string]string{"X-Grafana-Alerting-Signature": sidecar.GrafanaSignature(admitSecret, "", []byte(body))}); code != http.StatusUnauthorized ||
		!strings.Contains(b, "X-Grafana-Alerting-Timestamp is required") {
		t.Errorf("signature over the body alone: %d %s; want 401 naming the timestamp", code, b)
	}
	if code, b := post(map[string]string{"X-Grafana-Alerting-Signature": sidecar.GrafanaSignature(admitSecret, ts, []byte(body)),
		"X-Grafana-Alerting-Timestamp": ts}); code != http.StatusOK {
		t.Errorf("signed with a timestamp: %d %s", code, b)
	}
	if code, b := post(nil); code != http.StatusUnauthorized {
		t.Errorf("no signature and no token: %d %s", code, b)
	}
}
