package sidecar_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/sidecar"
)

// Every request body refuses a key given twice or in another case, with a
// 400 naming the key, and applies nothing. encoding/json keeps the last of
// two keys and matches names ignoring case, so {"scope":"job:purge", …,
// "scope":"all"} (or "SCOPE":"all") once made a hold on every job.
func TestRequestBodiesRefuseRepeatedAndCaseVariantKeys(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	for _, tc := range []struct {
		path, token, body, key string
	}{
		{"/v1/holds", admitPause, `{"scope":"job:a","reason":"x","scope":"all"}`, `"scope"`},
		{"/v1/holds", admitPause, `{"scope":"job:a","reason":"x","SCOPE":"all"}`, `"SCOPE"`},
		{"/v1/holds", admitPause, `{"Scope":"all","reason":"x"}`, `"Scope"`},
		{"/v1/holds", admitPause, `{"scope":"job:a","reason":"x","ſcope":"all"}`, `"ſcope"`},
		{"/v1/resume", admitPause, `{"reason":"a","Reason":"b"}`, `"Reason"`},
		{"/v1/jobs/a/acquire", admitWork, `{"n":1,"n":100}`, `"n"`},
		{"/v1/jobs/a/report", admitWork, `{"token":"t","rows":1,"ROWS":-1}`, `"ROWS"`},
	} {
		code, body := probe(t, "POST", hs.URL+tc.path, tc.token, tc.body)
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, tc.key) {
			t.Errorf("POST %s %s: %d %s; want 400 naming %s", tc.path, tc.body, code, body, tc.key)
		}
	}
	if _, body := probe(t, "GET", hs.URL+"/v1/holds", admitRead, ""); body != "[]\n" {
		t.Errorf("holds after refused requests: %s", body)
	}
	// The Grafana payload too, where the key may sit in an alert.
	for _, payload := range []string{
		`{"status":"firing","alerts":[{"status":"firing","fingerprint":"f1","labels":{"throttled_job":"a"},"status":"resolved"}]}`,
		`{"status":"firing","alerts":[{"status":"firing","fingerprint":"f1","labels":{"throttled_job":"a","throttled_job":"b"}}]}`,
		`{"status":"firing","alerts":[{"status":"firing","Fingerprint":"f2","fingerprint":"f1","labels":{"throttled_job":"a"}}]}`,
	} {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequest("POST", hs.URL+"/v1/hooks/grafana", strings.NewReader(payload))
		req.Header.Set("X-Grafana-Alerting-Signature", sidecar.GrafanaSignature(admitSecret, ts, []byte(payload)))
		req.Header.Set("X-Grafana-Alerting-Timestamp", ts)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "alerts[0]") {
			t.Errorf("Grafana payload %s: %d %s; want 400 naming where", payload, resp.StatusCode, b)
		}
	}
	if _, body := probe(t, "GET", hs.URL+"/v1/holds", admitRead, ""); body != "[]\n" {
		t.Errorf("holds after refused notifications: %s", body)
	}
}

// A release's reason must be text PostgreSQL can store: a NUL once gave
// 500 with the raw SQLSTATE, where the same reason in a pause gave 400.
func TestReleaseWithUnstorableReasonIs400(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	code, body := probe(t, "POST", hs.URL+"/v1/holds", admitPause, `{"scope":"job:a","ttl":"5m","reason":"nul test"}`)
	if code != http.StatusCreated {
		t.Fatalf("pause: %d %s", code, body)
	}
	id := body[strings.Index(body, `"id":"`)+6:]
	id = id[:strings.Index(id, `"`)]
	if code, body := probe(t, "DELETE", hs.URL+"/v1/holds/"+id+"?reason=%00", admitPause, ""); code != http.StatusBadRequest {
		t.Errorf("release with a NUL reason: %d %s; want 400", code, body)
	}
	if code, body := probe(t, "DELETE", hs.URL+"/v1/holds/"+id+"?reason=done", admitPause, ""); code != http.StatusOK {
		t.Errorf("release: %d %s", code, body)
	}
}
