package sidecar

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/config"
)

// returnURL accepts only URLs on an allowed scheme and host, under its
// path, whatever the input.
func FuzzReturnURL(f *testing.F) {
	for _, s := range []string{"https://grafana.example.com/d/throttled-jobs", "https://grafana.example.com.evil/d/",
		"https://evil.example/d/", "//grafana.example.com/d/", "javascript:alert(1)", "https://grafana.example.com@evil/d/",
		"https://GRAFANA.example.com/d/x", "http://grafana.example.com/d/", "https://grafana.example.com/dx", ""} {
		f.Add(s)
	}
	cfg := &config.Config{Grafana: config.Grafana{ReturnURLs: []string{"https://grafana.example.com/d/"}}}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := returnURL(cfg, raw)
		if err != nil || got == "" {
			return
		}
		u, perr := url.Parse(got)
		if perr != nil || u.Scheme != "https" || !strings.EqualFold(u.Host, "grafana.example.com") || !strings.HasPrefix(u.Path, "/d/") {
			t.Fatalf("returnURL(%q) accepted %q", raw, got)
		}
	})
}

// A CSRF token validates for the person it was made for and nobody else,
// and no other string validates.
func FuzzCSRF(f *testing.F) {
	f.Add("alice", "1700000000.00ff")
	f.Add("bob", "")
	f.Add("", ".")
	s := &Server{csrfKey: []byte("0123456789abcdef0123456789abcdef")}
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, actor, tok string) {
		good := s.csrfToken(actor, now.Add(-time.Minute))
		if err := s.checkCSRF(actor, good, now); err != nil {
			t.Fatalf("a fresh token for %q refused: %v", actor, err)
		}
		if tok != good && s.checkCSRF(actor, tok, now) == nil {
			t.Fatalf("%q validated for %q", tok, actor)
		}
		if other := actor + "x"; s.checkCSRF(other, good, now) == nil {
			t.Fatalf("%q's token validated for %q", actor, other)
		}
	})
}

// The Grafana webhook accepts a request only with the right signature
// over exactly its timestamp and body, or a pause token.
func FuzzGrafanaAuth(f *testing.F) {
	f.Add([]byte(`{"status":"firing"}`), "", "", "")
	f.Add([]byte(`{}`), "abc", "1700000000", "Bearer x")
	const secret = "grafana-secret-0123456789"
	s := &Server{cfg: &config.Config{Grafana: config.Grafana{WebhookSecret: secret, SignatureHeader: "X-Grafana-Alerting-Signature",
		TimestampHeader: "X-Grafana-Alerting-Timestamp", ReplayWindow: 5 * time.Minute}}}
	f.Fuzz(func(t *testing.T, body []byte, sig, ts, authz string) {
		r, _ := http.NewRequest("POST", "/v1/hooks/grafana", nil)
		r.Header.Set("X-Grafana-Alerting-Signature", sig)
		r.Header.Set("X-Grafana-Alerting-Timestamp", ts)
		r.Header.Set("Authorization", authz)
		who, err := s.authGrafana(r, body)
		if err != nil {
			return
		}
		if who != "grafana" || !strings.EqualFold(r.Header.Get("X-Grafana-Alerting-Signature"), GrafanaSignature(secret, r.Header.Get("X-Grafana-Alerting-Timestamp"), body)) {
			t.Fatalf("accepted as %q: sig %q ts %q body %q", who, sig, ts, body)
		}
		if t0 := r.Header.Get("X-Grafana-Alerting-Timestamp"); t0 != "" {
			sec, _ := strconv.ParseInt(t0, 10, 64)
			if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
				t.Fatalf("accepted a timestamp %s away", d)
			}
		}
	})
}
