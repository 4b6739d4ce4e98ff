package sidecar_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/sidecar"
)

// hostileCase is one request the API must refuse, sent exactly as written
// (method, request-URI, headers, body) on a connection of its own.
type hostileCase struct {
	name    string
	method  string
	uri     string // sent as is: percent-encoding and dot segments reach the server untouched
	headers map[string]string
	body    string
	// trickle sends only body's first byte, then nothing: a slow body.
	trickle bool
	code    int
	// says is a piece of the answer's body: the error names what is wrong.
	says string
}

// hostileCases are the hostile inputs issue 8 fixed and the other guards
// of admission, the strict decoder and the handlers, each by name. Every
// one is refused with its code and writes nothing. The bodies of the
// refusals are the API's error shape (api.Error), except /check, which
// answers as freno does (api.Check), and ServeMux's own redirects.
func hostileCases() []hostileCase {
	pause, work, read := map[string]string{"Authorization": "Bearer " + admitPause}, map[string]string{"Authorization": "Bearer " + admitWork},
		map[string]string{"Authorization": "Bearer " + admitRead}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	hook := func(sig, ts string) map[string]string {
		h := map[string]string{"X-Grafana-Alerting-Signature": sig}
		if ts != "" {
			h["X-Grafana-Alerting-Timestamp"] = ts
		}
		return h
	}
	alert := `{"status":"firing","alerts":[{"status":"firing","fingerprint":"f1","labels":{"throttled_job":"a"}}]}`
	return []hostileCase{
		// Slow bodies: refused at the body deadline, the connection closed.
		{name: "slow body to a pause", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","reason":"slow"}`, trickle: true, code: 408, says: "not received within 5s"},
		{name: "slow body to the webhook", method: "POST", uri: "/v1/hooks/grafana", headers: hook(strings.Repeat("0", 64), ts), body: alert, trickle: true, code: 408, says: "not received within 3s"},
		// Repeated keys, and keys that match only with case folded.
		{name: "duplicate key", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","reason":"x","scope":"all"}`, code: 400, says: `"scope" appears twice`},
		{name: "duplicate key upper case", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","reason":"x","SCOPE":"all"}`, code: 400, says: `"SCOPE"`},
		{name: "case-variant key alone", method: "POST", uri: "/v1/holds", headers: pause, body: `{"Scope":"all","reason":"x"}`, code: 400, says: "keys are case-sensitive"},
		{name: "duplicate key long s", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","reason":"x","ſcope":"all"}`, code: 400, says: `"ſcope"`},
		{name: "duplicate key in acquire", method: "POST", uri: "/v1/jobs/a/acquire", headers: work, body: `{"n":1,"n":100}`, code: 400, says: `"n" appears twice`},
		{name: "duplicate key in report", method: "POST", uri: "/v1/jobs/a/report", headers: work, body: `{"token":"t","rows":1,"ROWS":-1}`, code: 400, says: `"ROWS"`},
		{name: "duplicate key in resume", method: "POST", uri: "/v1/resume", headers: pause, body: `{"reason":"a","Reason":"b"}`, code: 400, says: `"Reason"`},
		{name: "duplicate label in a Grafana alert", method: "POST", uri: "/v1/hooks/grafana", headers: pause,
			body: `{"status":"firing","alerts":[{"status":"firing","fingerprint":"f1","labels":{"throttled_job":"a","throttled_job":"b"}}]}`, code: 400, says: "alerts[0]"},
		// Strictness beyond keys.
		{name: "unknown field", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","reason":"x","admin":true}`, code: 400, says: "unknown field"},
		{name: "two JSON values", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","reason":"x"} {}`, code: 400, says: "more than one JSON value"},
		{name: "number past float64", method: "POST", uri: "/v1/jobs/a/report", headers: work, body: `{"token":"t","rows":1,"duration_ms":1e400}`, code: 400, says: "body"},
		{name: "negative rows", method: "POST", uri: "/v1/jobs/a/report", headers: work, body: `{"token":"t","rows":-1}`, code: 400, says: "must not be negative"},
		{name: "too many tokens", method: "POST", uri: "/v1/jobs/a/acquire", headers: work, body: `{"n":101}`, code: 400, says: "at most 100"},
		{name: "negative max_wait", method: "POST", uri: "/v1/jobs/a/acquire", headers: work, body: `{"n":1,"max_wait":"-1s"}`, code: 400, says: "max_wait"},
		// Encoded paths: a job name is one segment, whatever its escapes.
		{name: "encoded dot segments in check", method: "GET", uri: "/check/%2e%2e", headers: read, code: 404, says: "unknown job"},
		{name: "encoded slash in check", method: "GET", uri: "/check/%2F", headers: read, code: 404, says: "no route"},
		{name: "encoded slash and dots in check", method: "GET", uri: "/check/a%2F..%2F..", headers: read, code: 404, says: "unknown job"},
		{name: "encoded NUL in check", method: "GET", uri: "/check/a%00", headers: read, code: 404, says: "unknown job"},
		{name: "encoded dots in acquire", method: "POST", uri: "/v1/jobs/%2e%2e/acquire", headers: work, body: `{"n":1}`, code: 404, says: "no job"},
		{name: "encoded slash in a hold id", method: "DELETE", uri: "/v1/holds/%2F..%2Fx?reason=x", headers: pause, code: 404},
		// NUL, which PostgreSQL cannot store, in text that would be stored.
		{name: "NUL in a pause reason", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","ttl":"5m","reason":"a\u0000b"}`, code: 400, says: "reason"},
		{name: "NUL in a release reason", method: "DELETE", uri: "/v1/holds/h1?reason=%00", headers: pause, code: 400, says: "reason"},
		{name: "NUL in a resume reason", method: "POST", uri: "/v1/resume", headers: pause, body: `{"reason":"a\u0000b"}`, code: 400, says: "reason"},
		{name: "NUL in a Grafana fingerprint", method: "POST", uri: "/v1/hooks/grafana", headers: pause,
			body: `{"status":"firing","alerts":[{"status":"firing","fingerprint":"f\u0000","labels":{"throttled_job":"a"}}]}`, code: 400, says: "alerts[0]"},
		// Oversized bodies, declared or not.
		{name: "oversized declared body", method: "POST", uri: "/v1/holds", headers: map[string]string{"Authorization": "Bearer " + admitPause, "Content-Length": "70000"},
			body: `{"scope":"job:a"`, trickle: true, code: 413, says: "at most 65536"},
		{name: "oversized chunked body", method: "POST", uri: "/v1/holds", headers: pause, body: `{"scope":"job:a","reason":"` + strings.Repeat("x", 70000) + `"}`, code: 413, says: "at most 65536"},
		// Authentication and scope, from the headers alone.
		{name: "no token", method: "POST", uri: "/v1/holds", body: `{"scope":"all","reason":"x"}`, code: 401, says: "bearer token is required"},
		{name: "unknown token", method: "POST", uri: "/v1/holds", headers: map[string]string{"Authorization": "Bearer nope"}, body: `{"scope":"all","reason":"x"}`, code: 401, says: "unknown token"},
		{name: "read token pauses", method: "POST", uri: "/v1/holds", headers: read, body: `{"scope":"all","reason":"x"}`, code: 403, says: "lacks scope"},
		{name: "work token pauses", method: "POST", uri: "/v1/holds", headers: work, body: `{"scope":"all","reason":"x"}`, code: 403, says: "lacks scope"},
		{name: "pause token acquires", method: "POST", uri: "/v1/jobs/a/acquire", headers: pause, body: `{"n":1}`, code: 403, says: "lacks scope"},
		{name: "pause token reloads", method: "POST", uri: "/v1/reload", headers: pause, code: 403, says: "lacks scope"},
		{name: "webhook without signature or token", method: "POST", uri: "/v1/hooks/grafana", body: alert, code: 401, says: "signature"},
		{name: "webhook signature without timestamp", method: "POST", uri: "/v1/hooks/grafana", headers: hook(sidecar.GrafanaSignature(admitSecret, "", []byte(alert)), ""), body: alert, code: 401, says: "Timestamp is required"},
		{name: "webhook stale timestamp", method: "POST", uri: "/v1/hooks/grafana", headers: hook(sidecar.GrafanaSignature(admitSecret, "1700000000", []byte(alert)), "1700000000"), body: alert, code: 401, says: "replay window"},
		{name: "webhook wrong signature", method: "POST", uri: "/v1/hooks/grafana", headers: hook(sidecar.GrafanaSignature("not-the-secret", ts, []byte(alert)), ts), body: alert, code: 401},
		// Cross-origin pauses only from Grafana.
		{name: "cross-origin preflight", method: "OPTIONS", uri: "/v1/holds", headers: map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
			code: 403, says: "cross-origin"},
		// Paths and methods no route serves answer the API's error too.
		{name: "no such route", method: "GET", uri: "/v1/nothing", headers: read, code: 404, says: "no route"},
		{name: "no such method", method: "PUT", uri: "/v1/holds", headers: pause, code: 405, says: "PUT"},
		{name: "bad audit since", method: "GET", uri: "/v1/audit?since=-1h", headers: read, code: 400, says: "since"},
	}
}

// sendRaw writes c's request on a connection of its own and returns the
// answer's status and body, or fails the test after 15 s.
func sendRaw(t *testing.T, addr string, c hostileCase) (int, string, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: throttled\r\nContent-Type: application/json\r\n", c.method, c.uri)
	for k, v := range c.headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	body := c.body
	switch {
	case c.trickle:
		if _, set := c.headers["Content-Length"]; !set {
			fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
		}
		body = body[:1]
	case len(body) > 32<<10:
		// Chunked: no length to refuse up front.
		b.WriteString("Transfer-Encoding: chunked\r\n")
		body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	default:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: no answer: %v", c.method, c.uri, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Close
}

// TestHostileRequests sends every hostile case to the real handler chain
// (auth, admission, decoder, handler) and wants each refused with its code,
// its body naming the problem, and no hold made. A refusal made before the
// body is in closes the connection.
func TestHostileRequests(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	addr := strings.TrimPrefix(hs.URL, "http://")
	for _, c := range hostileCases() {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			if c.trickle {
				t.Parallel() // each waits out a deadline
			}
			code, body, closed := sendRaw(t, addr, c)
			var shape struct {
				Error   *string
				Message *string // /check's freno answer
			}
			if err := json.Unmarshal([]byte(body), &shape); err != nil || (shape.Error == nil) == (shape.Message == nil) ||
				(shape.Message != nil && !strings.HasPrefix(c.uri, "/check/")) {
				t.Fatalf("%s %s: %d %q: not the API's error", c.method, c.uri, code, body)
			}
			msg := shape.Error
			if msg == nil {
				msg = shape.Message
			}
			if code != c.code || !strings.Contains(*msg, c.says) {
				t.Errorf("%s %s: %d %q; want %d saying %q", c.method, c.uri, code, *msg, c.code, c.says)
			}
			if c.trickle && !closed {
				t.Errorf("%s %s: refused before its body was in, yet the connection stays open", c.method, c.uri)
			}
		})
	}
	t.Cleanup(func() {
		if _, body := probe(t, "GET", hs.URL+"/v1/holds", admitRead, ""); body != "[]\n" {
			t.Errorf("holds after the hostile requests: %s", body)
		}
	})
}
