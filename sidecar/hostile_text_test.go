package sidecar_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/throttled/throttled/sidecar/api"
)

// releaseAll releases, as the pause token, every hold the test left, so the
// package's other tests start with none.
func releaseAll(t *testing.T, base string) {
	t.Helper()
	_, body := probe(t, "GET", base+"/v1/holds", admitRead, "")
	var hs []api.Hold
	if err := json.Unmarshal([]byte(body), &hs); err != nil {
		t.Fatalf("GET /v1/holds: %v: %s", err, body)
	}
	for _, h := range hs {
		if code, body := probe(t, "DELETE", base+"/v1/holds/"+h.ID+"?reason=cleanup", admitPause, ""); code != http.StatusOK {
			t.Errorf("release %s: %d %s", h.ID, code, body)
		}
	}
}

// Issue 33, point 1: a reason with a newline made `throttled holds`, `audit`
// and `status` print a forged row, and one with ESC rewrote the terminal.
// Through the real handler chain, every door that stores a person's text
// (a pause's reason, a release's reason, a resume's reason) refuses each
// character that can break, rewrite or reorder a line, naming the field,
// the character and where it is, and stores nothing.
func TestHoldTextThatForgesLinesIsRefused(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	t.Cleanup(func() { releaseAll(t, hs.URL) })
	for _, tc := range []struct{ reason, says string }{
		{"deploy\nh99  all  pause  manual  token:admin  23h59m0s  FORGED LINE", "reason: control character U+000A at byte 6; reasons and actors are one printable line"},
		{"done\r2026-12-05T23:40:00Z  hold_released  h9", "reason: control character U+000D at byte 4"},
		{"\x1b[2K\r\x1b[1A\x1b[2Kansi \x1b[31mRED\x1b[0m \x1b]0;title\a", "reason: control character U+001B at byte 0"},
		{"tab\tseparated", "reason: control character U+0009 at byte 3"},
		{"csi \u009b2K", "reason: control character U+009B at byte 4"},
		{"next \u0085line", "reason: control character U+0085 at byte 5"},
		{"ls \u2028forged", "reason: line separator U+2028 at byte 3"},
		{"ps \u2029forged", "reason: paragraph separator U+2029 at byte 3"},
		{"bidi \u202eenilrof", "reason: bidirectional control U+202E at byte 5"},
		{"isolate \u2067x\u2069", "reason: bidirectional control U+2067 at byte 8"},
	} {
		body, _ := json.Marshal(api.PauseRequest{Scope: "job:a", TTL: "5m", Reason: tc.reason})
		if code, got := probe(t, "POST", hs.URL+"/v1/holds", admitPause, string(body)); code != http.StatusBadRequest || !strings.Contains(got, tc.says) {
			t.Errorf("pause with reason %q: %d %s; want 400 saying %q", tc.reason, code, got, tc.says)
		}
		resume, _ := json.Marshal(api.ResumeRequest{Reason: tc.reason})
		if code, got := probe(t, "POST", hs.URL+"/v1/resume", admitPause, string(resume)); code != http.StatusBadRequest || !strings.Contains(got, tc.says) {
			t.Errorf("resume with reason %q: %d %s; want 400 saying %q", tc.reason, code, got, tc.says)
		}
	}
	// A release's reason, on a hold that exists.
	code, got := probe(t, "POST", hs.URL+"/v1/holds", admitPause, `{"scope":"job:a","ttl":"5m","reason":"real"}`)
	var h api.Hold
	if code != http.StatusCreated || json.Unmarshal([]byte(got), &h) != nil {
		t.Fatalf("pause: %d %s", code, got)
	}
	if code, got := probe(t, "DELETE", hs.URL+"/v1/holds/"+h.ID+"?reason="+url.QueryEscape("done\nh1  all  FORGED"), admitPause, ""); code != http.StatusBadRequest ||
		!strings.Contains(got, "reason: control character U+000A at byte 4") {
		t.Errorf("release with a newline in its reason: %d %s; want 400 naming it", code, got)
	}
	if _, got := probe(t, "GET", hs.URL+"/v1/holds", admitRead, ""); !strings.Contains(got, h.ID) || strings.Count(got, `"id"`) != 1 {
		t.Errorf("holds after the refusals: %s; want %s alone, still active", got, h.ID)
	}
}

// Issue 33, point 6: "ratio":5e-324 was taken as a live override, the job
// running at 1e-321 of its rate while its reason said it ran, and
// "ttl":"1ns" answered 500 with the database's check constraint while
// "999us" was accepted. A ratio under a thousandth and a TTL under a second
// are the caller's mistakes: 400, saying the bound, and for the ratio, that
// a pause is asked for as one.
func TestHoldBoundsAreRefusedWith400(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	t.Cleanup(func() { releaseAll(t, hs.URL) })
	for _, tc := range []struct{ body, says string }{
		{`{"scope":"job:a","ttl":"5m","reason":"x","ratio":5e-324}`, "ratio 5e-324 is below the smallest accepted, 0.001"},
		{`{"scope":"job:a","ttl":"5m","reason":"x","ratio":1e-320}`, "place a pause"},
		{`{"scope":"job:a","ttl":"5m","reason":"x","ratio":0.0009}`, "below the smallest accepted, 0.001"},
		{`{"scope":"job:a","ttl":"1ns","reason":"x"}`, "TTL 1ns is under the shortest accepted, 1s"},
		{`{"scope":"job:a","ttl":"999us","reason":"x"}`, "TTL 999µs is under the shortest accepted, 1s"},
		{`{"scope":"all","ttl":"999ms","reason":"x"}`, "TTL 999ms is under the shortest accepted, 1s"},
	} {
		if code, got := probe(t, "POST", hs.URL+"/v1/holds", admitPause, tc.body); code != http.StatusBadRequest || !strings.Contains(got, tc.says) {
			t.Errorf("POST /v1/holds %s: %d %s; want 400 saying %q", tc.body, code, got, tc.says)
		}
	}
	if _, got := probe(t, "GET", hs.URL+"/v1/holds", admitRead, ""); got != "[]\n" {
		t.Errorf("holds after the refusals: %s", got)
	}
	// The bounds themselves are accepted.
	for _, body := range []string{`{"scope":"job:a","ttl":"1s","reason":"x"}`, `{"scope":"job:a","ttl":"5m","reason":"x","ratio":0.001}`} {
		if code, got := probe(t, "POST", hs.URL+"/v1/holds", admitPause, body); code != http.StatusCreated {
			t.Errorf("POST /v1/holds %s: %d %s; want 201", body, code, got)
		}
	}
}

// Issue 33, point 7: an exemption from no_such_signal was placed and did
// nothing. It is refused, naming the signals there are; an exemption from
// one of throttled's signals is placed.
func TestExemptFromAnUnknownSignalIsRefused(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	t.Cleanup(func() { releaseAll(t, hs.URL) })
	code, got := probe(t, "POST", hs.URL+"/v1/holds", admitPause, `{"scope":"job:a","ttl":"5m","reason":"x","exempt":"no_such_signal"}`)
	if code != http.StatusBadRequest || !strings.Contains(got, `exempt \"no_such_signal\": no such signal`) ||
		!strings.Contains(got, "replica_lag_seconds") || !strings.Contains(got, "vacuum_running") || !strings.Contains(got, "custom signals known: none") {
		t.Errorf("exempt from no_such_signal: %d %s; want 400 naming the signals there are", code, got)
	}
	if code, got := probe(t, "POST", hs.URL+"/v1/holds", admitPause, `{"scope":"job:a","ttl":"5m","reason":"x","exempt":"replica_lag_seconds"}`); code != http.StatusCreated {
		t.Errorf("exempt from replica_lag_seconds: %d %s; want 201", code, got)
	}
}

// Issue 33, point 7: a hold on job:nosuchjob was placed without a word. It
// is still placed (a job may start after its pause), and the answer warns
// that no process has registered such a job; a hold on a configured job,
// or on all, warns of nothing.
func TestHoldOnAnUnknownJobWarns(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	t.Cleanup(func() { releaseAll(t, hs.URL) })
	for _, tc := range []struct{ scope, warns string }{
		{"job:nosuchjob", `no process has registered job \"nosuchjob\"`},
		{"group:nosuch_", `no process has registered a job whose name starts with \"nosuch_\"`},
		{"job:a", ""},
		{"group:a", ""},
		{"all", ""},
	} {
		code, got := probe(t, "POST", hs.URL+"/v1/holds", admitPause, `{"scope":"`+tc.scope+`","ttl":"5m","reason":"x"}`)
		if code != http.StatusCreated {
			t.Errorf("pause %s: %d %s; want 201", tc.scope, code, got)
			continue
		}
		switch {
		case tc.warns != "" && !strings.Contains(got, `"warnings":["`+tc.warns):
			t.Errorf("pause %s: %s; want a warning saying %s", tc.scope, got, tc.warns)
		case tc.warns == "" && strings.Contains(got, "warnings"):
			t.Errorf("pause %s: %s; want no warning", tc.scope, got)
		}
	}
}

// A Grafana alert's summary is often several lines. Automation forwards
// it, and the pause it asks for must not be refused for its layout: its
// lines become one reason's line, and the hold is made.
func TestGrafanaSummaryOfSeveralLinesPausesOnOneLine(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	t.Cleanup(func() { releaseAll(t, hs.URL) })
	alert := `{"status":"firing","alerts":[{"status":"firing","fingerprint":"multiline-` + strings.ReplaceAll(t.Name(), "/", "-") +
		`","labels":{"alertname":"HighLoad","throttled_job":"a"},"annotations":{"summary":"primary load high\nh99  all  pause  FORGED\r\n\u001b[31msee runbook"}}]}`
	if code, got := probe(t, "POST", hs.URL+"/v1/hooks/grafana", admitPause, alert); code != http.StatusOK {
		t.Fatalf("webhook: %d %s", code, got)
	}
	_, body := probe(t, "GET", hs.URL+"/v1/holds", admitRead, "")
	var held []api.Hold
	if err := json.Unmarshal([]byte(body), &held); err != nil || len(held) != 1 {
		t.Fatalf("holds: %v %s; want the alert's", err, body)
	}
	if want := "primary load high h99  all  pause  FORGED [31msee runbook"; held[0].Reason != want {
		t.Errorf("the alert's hold has reason %q; want %q", held[0].Reason, want)
	}
}
