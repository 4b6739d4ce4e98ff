package sidecar

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

// returnURL accepts only URLs on an allowed scheme and host, under its
// path, whatever the input.
func FuzzReturnURL(f *testing.F) {
	for _, s := range []string{"https://grafana.example.com/d/throttled-jobs", "https://grafana.example.com.evil/d/",
		"https://evil.example/d/", "//grafana.example.com/d/", "javascript:alert(1)", "https://grafana.example.com@evil/d/",
		"https://GRAFANA.example.com/d/x", "http://grafana.example.com/d/", "https://grafana.example.com/dx", "",
		"https://grafana.example.com/d/%2e%2e/admin/users", "https://grafana.example.com/d/.%2e/admin", "https://grafana.example.com/d/%2E./x"} {
		f.Add(s)
	}
	cfg := &config.Config{Grafana: config.Grafana{ReturnURLs: []string{"https://grafana.example.com/d/"}}}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := returnURL(cfg, raw)
		if err != nil || got == "" {
			return
		}
		u, perr := url.Parse(got)
		if perr != nil || u.Scheme != "https" || !strings.EqualFold(u.Host, "grafana.example.com") || !strings.HasPrefix(u.Path, "/d/") ||
			!strings.HasPrefix(browserPath(u.EscapedPath()), "/d/") {
			t.Fatalf("returnURL(%q) accepted %q (a browser goes to %q)", raw, got, browserPath(u.EscapedPath()))
		}
	})
}

// browserPath resolves dot segments as a browser does (the URL standard
// reads "%2e" in either case as a dot).
func browserPath(escaped string) string {
	var out []string
	segs := strings.Split(escaped, "/")
	for i, seg := range segs {
		switch strings.ReplaceAll(strings.ToLower(seg), "%2e", ".") {
		case ".":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	return strings.Join(out, "/")
}

// Dot segments cannot step out from under an allowed path, however they
// are written: a return of /d/%2e%2e/admin/users once redirected with 303,
// and the browser went to /admin/users.
func TestReturnURLRefusesDotSegments(t *testing.T) {
	cfg := &config.Config{Grafana: config.Grafana{ReturnURLs: []string{"https://grafana.example.com/d/"}}}
	for _, p := range []string{"/d/../admin/users", "/d/%2e%2e/admin/users", "/d/.%2e/admin/users", "/d/%2E%2E/admin/users",
		"/d/%2e./admin", "/d/x/%2e%2e/%2e%2e/admin", "/d/%2e", "/d/x/..", "/d/%252e%252e/admin", "/d/%2fadmin", "/d/%5c..%5cadmin"} {
		if got, err := returnURL(cfg, "https://grafana.example.com"+p); err == nil {
			t.Errorf("return %s accepted as %q (a browser goes to %q)", p, got, browserPath(p))
		}
	}
	for _, p := range []string{"/d/abc/throttled-jobs", "/d/x.y/z", "/d/..x/y", "/d/"} {
		if _, err := returnURL(cfg, "https://grafana.example.com"+p); err != nil {
			t.Errorf("return %s refused: %v", p, err)
		}
	}
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
// over exactly its timestamp and body, the timestamp present and fresh,
// or a pause token.
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
		t0 := r.Header.Get("X-Grafana-Alerting-Timestamp")
		if t0 == "" {
			t.Fatalf("accepted a signature without a timestamp: body %q", body)
		}
		sec, _ := strconv.ParseInt(t0, 10, 64)
		if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
			t.Fatalf("accepted a timestamp %s away", d)
		}
	})
}

// A Grafana notification is planned whole or refused whole: any alert
// without a storable fingerprint, with another status, or making a hold
// the store would refuse refuses the notification; a planned one has an
// operation per alert, each keyed by its fingerprint, with nothing
// PostgreSQL cannot store.
func FuzzGrafanaPayload(f *testing.F) {
	f.Add([]byte(`{"alerts":[{"status":"firing","fingerprint":"a","labels":{"throttled_job":"purge"}}]}`))
	f.Add([]byte(`{"alerts":[{"status":"resolved","fingerprint":"a"},{"status":"pending","fingerprint":"b"}]}`))
	f.Add([]byte(`{"alerts":[{"status":"firing","fingerprint":"a","labels":{"throttled_group":""},"annotations":{"summary":" "}}]}`))
	f.Add([]byte(`{"alerts":[{"status":"firing","fingerprint":"","labels":{"throttled_job":"Bad Name"}}]}`))
	f.Add([]byte(`{"alerts":[{"status":"resolved","fingerprint":"a\u0000"},{"status":"firing","fingerprint":"b","annotations":{"summary":"x\u0000"}}]}`))
	holdsCfg := holds.Config{TTL: hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var p GrafanaPayload
		if decodeStrict(body, &p, false) != nil {
			return
		}
		if dup := repeatedKey(body, false); dup != "" {
			t.Fatalf("payload with key %q twice decoded", dup)
		}
		ops, err := planGrafana(p, "grafana", time.Hour, holdsCfg.Check)
		if err != nil {
			if ops != nil {
				t.Fatalf("refused with %d operations planned", len(ops))
			}
			return
		}
		if len(ops) != len(p.Alerts) {
			t.Fatalf("%d operations for %d alerts", len(ops), len(p.Alerts))
		}
		for i, op := range ops {
			a := p.Alerts[i]
			if a.Fingerprint == "" || len(a.Fingerprint) > maxFingerprint || hold.Storable(a.Fingerprint) != nil || hold.Storable(op.req.Actor) != nil ||
				op.key != "grafana:"+a.Fingerprint || op.index != i {
				t.Fatalf("alert %d planned as %+v", i, op)
			}
			switch a.Status {
			case "firing":
				if !op.firing || holdsCfg.Check(op.req) != nil || op.req.Source != hold.SourceGrafanaAlert {
					t.Fatalf("firing alert %d planned as %+v", i, op)
				}
			case "resolved":
				if op.firing {
					t.Fatalf("resolved alert %d planned as firing", i)
				}
			default:
				t.Fatalf("status %q planned", a.Status)
			}
		}
	})
}

// Every API request body goes through the strict decoder and its own
// checks; whatever gets through is within bounds: a valid scope and a
// scope to pause, 1 to 100 tokens and at most 10 s of waiting
// to acquire, no negative or non-finite number in a report.
func FuzzRequestBodies(f *testing.F) {
	f.Add([]byte(`{"scope":"job:purge","ttl":"30m","reason":"x"}`))
	f.Add([]byte(`{"n":101,"max_wait":"-1s"}`))
	f.Add([]byte(`{"token":"t","rows":-1,"duration_ms":1e400}`))
	f.Add([]byte(`{"token":"t","rows":5,"duration_ms":3.5,"batch_size":10,"remaining":0} {}`))
	f.Add([]byte(`{"scope":"job:purge","reason":"x","scope":"all"}`))
	f.Add([]byte(`{"scope":"job:purge","SCOPE":"all"}`))
	f.Add([]byte(`{"token":"t","rows":1,"Rows":-1}`))
	f.Add([]byte(`{"token":"t","rows":9223372036854775807,"duration_ms":1}`))
	f.Add([]byte(`{"token":"t","rows":41,"batch_size":50}`))
	f.Add([]byte(`{"n":2,"worker":"pod-7\u001b[2K"}`))
	f.Add([]byte(`{"n":2,"worker":"batch-worker-3.example"}`))
	body := func(b []byte) *http.Request {
		r, _ := http.NewRequest("POST", "/", bytes.NewReader(b))
		return r
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if dup := repeatedKey(b, true); dup != "" {
			for _, v := range []any{&api.PauseRequest{}, &api.AcquireRequest{}, &api.ReportRequest{}, &api.ResumeRequest{}} {
				if err := decode(body(b), v); err == nil {
					t.Fatalf("%T decoded %q with key %q twice (ignoring case)", v, b, dup)
				}
			}
		}
		var pr api.PauseRequest
		if decode(body(b), &pr) == nil {
			if sc, _, err := parsePause(pr); err == nil && sc.Validate() != nil {
				t.Fatalf("pause %q parsed to an invalid scope %v", b, sc)
			}
		}
		var ar api.AcquireRequest
		if decode(body(b), &ar) == nil {
			if wait, err := parseAcquire(&ar); err == nil && (ar.N < 1 || ar.N > 100 || wait < 0 || wait > 10*time.Second) {
				t.Fatalf("acquire %q parsed to n=%d wait=%s", b, ar.N, wait)
			}
			if _, err := parseAcquire(&ar); err == nil && (len(ar.Worker) > maxWorkerName || !utf8.ValidString(ar.Worker) ||
				strings.IndexFunc(ar.Worker, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0) {
				t.Fatalf("acquire %q passed with worker %q", b, ar.Worker)
			}
		}
		var rr api.ReportRequest
		if decode(body(b), &rr) == nil && checkReport(rr) == nil {
			if rr.Rows < 0 || rr.BatchSize < 0 || !(rr.DurationMs >= 0) || math.IsInf(rr.DurationMs, 0) || (rr.Remaining != nil && *rr.Remaining < 0) {
				t.Fatalf("report %q passed its check: %+v", b, rr)
			}
			// Within what the batch could hold, and summed without
			// ever wrapping.
			for _, maxBatch := range []int{0, 1, 40} {
				if checkReportRows(rr, maxBatch) != nil {
					continue
				}
				bound := int64(maxReportRows)
				if maxBatch > 0 {
					bound = int64(maxBatch)
				}
				if int64(rr.BatchSize) > bound || rr.Rows > bound || (rr.BatchSize > 0 && rr.Rows > int64(rr.BatchSize)) {
					t.Fatalf("report %q passed with max_batch_size %d: rows %d, batch_size %d", b, maxBatch, rr.Rows, rr.BatchSize)
				}
			}
			if sum := addRows(addRows(math.MaxInt64-1, rr.Rows), rr.Rows); sum < math.MaxInt64-1 {
				t.Fatalf("rows %d summed to %d", rr.Rows, sum)
			}
		}
	})
}

func TestUnderPathIsOnASegmentBoundary(t *testing.T) {
	for _, tc := range []struct {
		p, allowed string
		want       bool
	}{
		{"/d/x", "/d/", true}, {"/d/x", "/d", true}, {"/d", "/d", true}, {"/dx", "/d", false}, {"/dx", "/d/", false},
		{"/anything", "", true}, {"/anything", "/", true}, {"/d", "/d/", false},
	} {
		if got := underPath(tc.p, tc.allowed); got != tc.want {
			t.Errorf("underPath(%q, %q) = %v", tc.p, tc.allowed, got)
		}
	}
}

// repeatedKey returns a key that some object in a JSON document repeats,
// or "". With fold, keys that differ only in case (as encoding/json
// matches struct fields) count as the same.
func repeatedKey(b []byte, fold bool) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	type level struct {
		object  bool
		wantKey bool
		keys    map[string]bool
	}
	var stack []*level
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		top := (*level)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &level{object: true, wantKey: true, keys: map[string]bool{}})
			case '[':
				stack = append(stack, &level{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
			continue
		case string:
			if top != nil && top.object && top.wantKey {
				k := v
				if fold {
					k = strings.ToLower(strings.ToUpper(v))
				}
				if top.keys[k] {
					return v
				}
				top.keys[k], top.wantKey = true, false
				continue
			}
		}
		valueDone()
	}
}
