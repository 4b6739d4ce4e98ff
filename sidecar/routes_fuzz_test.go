package sidecar_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/fuzzcrash"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

// fuzzAuth are the header variants FuzzRoutes picks from, by index.
var fuzzAuth = []string{"none", "wrong token", "read", "pause", "work", "grafana signed", "grafana unstamped"}

// FuzzRoutes sends a fuzzed method, request-URI, header variant and body
// through the real handler chain (srv.Handler(): CORS, auth, admission,
// decoder, handler) on a real database. For every request: no panic; no
// 2xx on a protected route without a token of its scope (or, for the
// webhook, its signature); every 4xx and 5xx body is api.Error (/check's
// is freno's answer; the confirm page's HTML); a 5xx only of the designed
// kinds (503 shed, /check's 500); and a refused request writes neither a
// hold nor an audit entry. A go test -fuzz worker is a process of its own
// and starts its own pair (pgtest starts one on first use).
func FuzzRoutes(f *testing.F) {
	fuzzcrash.Keep(f)
	for _, c := range hostileCases() {
		auth := 0
		switch c.headers["Authorization"] {
		case "Bearer " + admitRead:
			auth = 2
		case "Bearer " + admitPause:
			auth = 3
		case "Bearer " + admitWork:
			auth = 4
		case "Bearer nope":
			auth = 1
		}
		f.Add(c.method, c.uri, uint8(auth), c.body)
	}
	for _, r := range sidecar.Routes() {
		method, path, _ := strings.Cut(r.Pattern, " ")
		path = strings.NewReplacer("{job}", "a", "{id}", "h1", "{storeType}", "mysql", "{storeName}", "main").Replace(path)
		for auth := range fuzzAuth {
			f.Add(method, path, uint8(auth), `{"scope":"job:a","reason":"fuzz","ttl":"1m"}`)
		}
	}
	f.Add("GET", "/check/..%2f..%2fv1%2fholds", uint8(0), "")
	f.Add("POST", "/v1/holds/../holds", uint8(2), `{"scope":"all","reason":"x"}`)
	f.Add("POST", "/v1/hooks/grafana", uint8(5), `{"status":"firing","alerts":[{"status":"firing","fingerprint":"f1","labels":{"throttled_job":"a"}}]}`)

	h, db := fuzzServer(f)
	scopes := http.NewServeMux() // the route table's patterns, to know which route a request reaches
	for _, r := range sidecar.Routes() {
		scope := r.Scope
		scopes.HandleFunc(r.Pattern, func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Scope", string(scope)) })
	}
	f.Fuzz(func(t *testing.T, method, uri string, auth uint8, body string) {
		if !strings.HasPrefix(uri, "/") || strings.ContainsAny(uri, " \r\n") || method == "" {
			return
		}
		req, err := http.NewRequest(method, "http://throttled"+uri, strings.NewReader(body))
		if err != nil {
			return
		}
		who := fuzzAuth[int(auth)%len(fuzzAuth)]
		switch who {
		case "wrong token":
			req.Header.Set("Authorization", "Bearer nope")
		case "read":
			req.Header.Set("Authorization", "Bearer "+admitRead)
		case "pause":
			req.Header.Set("Authorization", "Bearer "+admitPause)
		case "work":
			req.Header.Set("Authorization", "Bearer "+admitWork)
		case "grafana signed":
			ts := strconv.FormatInt(time.Now().Unix(), 10)
			req.Header.Set("X-Grafana-Alerting-Signature", sidecar.GrafanaSignature(admitSecret, ts, []byte(body)))
			req.Header.Set("X-Grafana-Alerting-Timestamp", ts)
		case "grafana unstamped":
			req.Header.Set("X-Grafana-Alerting-Signature", sidecar.GrafanaSignature(admitSecret, "", []byte(body)))
		}
		before := dbWrites(t, db)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code := rec.Code

		probe := httptest.NewRecorder()
		scopes.ServeHTTP(probe, req)
		scope := config.Scope(probe.Header().Get("Scope"))
		if code >= 200 && code < 300 {
			ok := false
			switch scope {
			case "":
				ok = true
			case sidecar.ScopeHook:
				ok = who == "grafana signed" || who == "pause"
			case sidecar.ScopeUI:
				ok = who == "pause"
			case config.ScopeRead:
				ok = who == "read"
			case config.ScopePause:
				ok = who == "pause"
			case config.ScopeWork:
				ok = who == "work"
			}
			if !ok {
				t.Fatalf("%s %s as %q: %d on a route of scope %q", method, uri, who, code, scope)
			}
		}
		// /readyz's 503 is api.Ready, with its problems.
		if code >= 400 && method != http.MethodHead && scope != sidecar.ScopeUI && !(req.URL.Path == "/readyz" && code == http.StatusServiceUnavailable) {
			var shape struct{ Error, Message *string }
			if err := json.Unmarshal(rec.Body.Bytes(), &shape); err != nil || (shape.Error == nil && (shape.Message == nil || !strings.HasPrefix(req.URL.Path, "/check/"))) {
				t.Fatalf("%s %s as %q: %d %q: not the API's error", method, uri, who, code, rec.Body.String())
			}
		}
		if code >= 500 && code != http.StatusServiceUnavailable && !(code == http.StatusInternalServerError && strings.HasPrefix(req.URL.Path, "/check/")) {
			t.Fatalf("%s %s as %q: %d %s: not a designed 5xx", method, uri, who, code, rec.Body.String())
		}
		if code >= 400 {
			if after := dbWrites(t, db); after != before {
				t.Fatalf("%s %s as %q: refused with %d, yet holds and audit went from %v to %v", method, uri, who, code, before, after)
			}
		}
	})
}

// fuzzServer is admitServer's sidecar as a bare handler, and an admin pool
// on its database.
func fuzzServer(f *testing.F) (http.Handler, *pgxpool.Pool) {
	client, admin := coordinatedClient(f)
	cfg := configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10})
	cfg.MaxConcurrent, cfg.OpenReads = 8, false
	cfg.Tokens = []config.Token{{Name: "viewer", Secret: admitRead, Scopes: []config.Scope{config.ScopeRead}},
		{Name: "oncall", Secret: admitPause, Scopes: []config.Scope{config.ScopePause}},
		{Name: "worker", Secret: admitWork, Scopes: []config.Scope{config.ScopeWork}}}
	cfg.Grafana = config.Grafana{WebhookSecret: admitSecret, SignatureHeader: "X-Grafana-Alerting-Signature",
		TimestampHeader: "X-Grafana-Alerting-Timestamp", ReplayWindow: 5 * time.Minute, HoldTTL: time.Hour}
	cfg.HoldTTL = hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	db, err := pgxpool.New(context.Background(), admin)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(db.Close)
	return srv.Handler(), db
}

// dbWrites counts the rows a request could write: holds, and audit
// entries by anyone but throttled itself (its controller audits mode
// changes on its own, while the fuzzer runs), less expiries: an earlier
// input's hold that expires is audited when its time comes, in its
// creator's name, whatever request is being served (one did during a
// refused Grafana hook on a loaded machine).
func dbWrites(t *testing.T, db *pgxpool.Pool) [2]int64 {
	t.Helper()
	var n [2]int64
	if err := db.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM throttled.holds), (SELECT count(*) FROM throttled.audit WHERE actor <> 'throttled' AND event <> $1)", holds.EventHoldExpired).Scan(&n[0], &n[1]); err != nil {
		t.Fatal(err)
	}
	return n
}
