package page

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

var t0 = time.Date(2026, 9, 13, 8, 43, 0, 0, time.UTC)

// receiver records what it is sent.
type receiver struct {
	mu     sync.Mutex
	bodies []map[string]any
	heads  []http.Header
	fail   int // answer 500 this many times first
}

func (r *receiver) server(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail > 0 {
			r.fail--
			w.WriteHeader(500)
			return
		}
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			var arr []map[string]any
			if json.Unmarshal(raw, &arr) == nil && len(arr) == 1 {
				v = arr[0]
			}
		}
		v["_raw"] = string(raw)
		r.bodies = append(r.bodies, v)
		r.heads = append(r.heads, req.Header.Clone())
	}))
	t.Cleanup(srv.Close)
	return srv
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

func run(t *testing.T, p *Pager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor polls the receiver until it has n deliveries, or fails after
// 10 s.
func waitFor(t *testing.T, r *receiver, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for r.count() < n {
		select {
		case <-deadline.C:
			t.Fatalf("%d deliveries; want %d", r.count(), n)
		case <-tick.C:
		}
	}
}

func critical(at time.Time) Decision {
	return Decision{At: at, Mode: status.ModeCritical, Events: []status.Event{{Kind: status.EventCritical, At: at,
		Signal: "primary_load", Value: 1.2, Threshold: 1, Jobs: []status.JobRate{{Job: "purge", Rate: 4}}, Message: "critical: primary_load at 1.2"}}}
}

func TestWebhookIsSignedDeduplicatedAndResolved(t *testing.T) {
	var r receiver
	srv := r.server(t)
	p := New(Config{Notifiers: []Notifier{Webhook{URL: srv.URL, Secret: "s3cret"}}, Cluster: "db1", Dashboard: "http://grafana/d/throttled"})
	run(t, p)
	p.Decision(critical(t0))
	p.Decision(critical(t0.Add(time.Second))) // the same cause again: no second page
	p.Decision(Decision{At: t0.Add(time.Minute), Mode: status.ModeRunning,
		Events: []status.Event{{Kind: status.EventRecovered, At: t0.Add(time.Minute)}}})
	waitFor(t, &r, 2)
	if r.count() != 2 {
		t.Fatalf("%d deliveries; want fire and resolve", r.count())
	}
	fire, resolve := r.bodies[0], r.bodies[1]
	if fire["firing"] != true || resolve["firing"] != false || fire["key"] != "db1:critical:primary_load" || fire["key"] != resolve["key"] {
		t.Fatalf("fire %v resolve %v", fire, resolve)
	}
	if fire["signal"] != "primary_load" || fire["value"] != 1.2 || fire["threshold"] != 1.0 || fire["dashboard"] != "http://grafana/d/throttled" ||
		!strings.Contains(fire["_raw"].(string), `"job":"purge"`) && !strings.Contains(fire["_raw"].(string), `"Job":"purge"`) {
		t.Fatalf("page lacks what a person needs: %v", fire)
	}
	ts := r.heads[0].Get("X-Throttled-Timestamp")
	if got, want := r.heads[0].Get("X-Throttled-Signature"), Sign("s3cret", ts, []byte(fire["_raw"].(string))); got != want || ts == "" {
		t.Fatalf("signature %q; want %q", got, want)
	}
	if Sign("other", ts, []byte(fire["_raw"].(string))) == r.heads[0].Get("X-Throttled-Signature") {
		t.Fatal("another secret gives the same signature")
	}
}

func TestPagerDutyContract(t *testing.T) {
	var r receiver
	srv := r.server(t)
	p := New(Config{Notifiers: []Notifier{PagerDuty{URL: srv.URL, RoutingKey: "rk"}}, Cluster: "db1"})
	run(t, p)
	p.Decision(critical(t0))
	p.Decision(Decision{At: t0.Add(time.Minute), Events: []status.Event{{Kind: status.EventRecovered, At: t0.Add(time.Minute)}}})
	waitFor(t, &r, 2)
	trigger, resolve := r.bodies[0], r.bodies[1]
	if trigger["event_action"] != "trigger" || resolve["event_action"] != "resolve" || trigger["routing_key"] != "rk" ||
		trigger["dedup_key"] != resolve["dedup_key"] || trigger["dedup_key"] != "db1:critical:primary_load" {
		t.Fatalf("trigger %v resolve %v", trigger, resolve)
	}
	payload := trigger["payload"].(map[string]any)
	if payload["severity"] != "critical" || payload["source"] != "db1" || payload["summary"] == "" {
		t.Fatalf("payload %v", payload)
	}
}

func TestStalePagesOnlyAfterItsThresholdAndRetriesAreCapped(t *testing.T) {
	r := receiver{fail: 2}
	srv := r.server(t)
	p := New(Config{Notifiers: []Notifier{Webhook{URL: srv.URL, Secret: "s"}}, StaleAfter: 30 * time.Second})
	run(t, p)
	stale := func(at time.Time) Decision {
		return Decision{At: at, Mode: status.ModeStale, Binding: status.Binding{Signal: signals.PrimaryLoad}, Reason: "stale: primary_load (age 4s)"}
	}
	p.Decision(stale(t0))
	p.Decision(stale(t0.Add(29 * time.Second)))
	if len(p.Active()) != 0 {
		t.Fatal("paged before the stale threshold")
	}
	p.Decision(stale(t0.Add(31 * time.Second)))
	waitFor(t, &r, 1) // after two failed attempts
	if r.bodies[0]["cause"] != "stale" {
		t.Fatalf("%v", r.bodies[0])
	}
	p.Decision(Decision{At: t0.Add(40 * time.Second), Mode: status.ModeRunning})
	waitFor(t, &r, 2)
	if r.bodies[1]["firing"] != false {
		t.Fatal("stale not resolved when fresh")
	}
	// A receiver that always fails gets MaxAttempts tries, not more.
	bad := receiver{fail: 1000}
	bsrv := bad.server(t)
	q := New(Config{Notifiers: []Notifier{Webhook{URL: bsrv.URL, Secret: "s"}}, MaxAttempts: 2})
	q.deliver(context.Background(), Alert{Key: "k", Firing: true})
	if bad.fail != 998 {
		t.Fatalf("%d attempts; want 2", 1000-bad.fail)
	}
	if sent, failed := q.Counts(); sent["webhook"] != 0 || failed["webhook"] != 1 {
		t.Fatalf("counts sent %v failed %v", sent, failed)
	}
	if sent, _ := p.Counts(); sent["webhook"] != 2 {
		t.Fatalf("sent %v; want 2 (the page and its resolve)", sent)
	}
}

func TestUnhonouredFiresPerJobAndResolves(t *testing.T) {
	var r receiver
	srv := r.server(t)
	p := New(Config{Notifiers: []Notifier{Alertmanager{URL: srv.URL}}})
	run(t, p)
	p.Unhonoured(t0, map[string]string{"purge": "job purge kept working 12s under hold h3"})
	p.Unhonoured(t0.Add(time.Second), map[string]string{"purge": "again"})
	p.Unhonoured(t0.Add(2*time.Second), nil)
	waitFor(t, &r, 2)
	labels := r.bodies[0]["labels"].(map[string]any)
	if labels["alertname"] != "ThrottledPauseNotHonoured" || r.bodies[0]["endsAt"] != nil || r.bodies[1]["endsAt"] == nil {
		t.Fatalf("fire %v resolve %v", r.bodies[0], r.bodies[1])
	}
}

// A job whose name is a prefix of another's: the first honouring its
// pause must not resolve the second's page, which still fires.
func TestUnhonouredResolvesExactlyTheJobThatRecovered(t *testing.T) {
	p := New(Config{})
	p.Unhonoured(t0, map[string]string{"purge": "a", "purge_sessions": "b"})
	p.Unhonoured(t0.Add(2*time.Second), map[string]string{"purge_sessions": "b"})
	got := p.Active()
	if len(got) != 1 || !strings.Contains(got[0].Key, "purge_sessions") {
		t.Fatalf("active pages %+v; want purge_sessions's alone", got)
	}
}

// Every page links its section of the runbook, and the section exists.
func TestEveryPageLinksItsRunbookSection(t *testing.T) {
	runbook, err := os.ReadFile("../docs/RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	for cause, name := range alertNames {
		if !strings.Contains(string(runbook), "\n## "+name+"\n") {
			t.Errorf("cause %s: docs/RUNBOOK.md has no section ## %s", cause, name)
		}
		if got, want := RunbookFor(DefaultRunbook, cause), DefaultRunbook+"#"+strings.ToLower(name); got != want {
			t.Errorf("RunbookFor(%s) = %s, want %s", cause, got, want)
		}
	}
	p := New(Config{Runbook: "https://wiki.example/runbook"})
	p.fire(Alert{Key: "critical", Cause: "critical"})
	a := <-p.queue
	if a.Runbook != "https://wiki.example/runbook#throttledcritical" {
		t.Errorf("page runbook %q; want the configured runbook's #throttledcritical", a.Runbook)
	}
}

// A failover pages once, with what changed, and the page resolves by
// itself PrimaryChangedFor later, at the first decision after.
func TestPrimaryChangedPagesOnceAndResolvesItself(t *testing.T) {
	p := New(Config{})
	p.PrimaryChanged(t0, "primary changed from 127.0.0.1:5432 (timeline 1) to 127.0.0.1:5433 (timeline 2)")
	p.PrimaryChanged(t0.Add(time.Second), "again")
	got := p.Active()
	if len(got) != 1 || got[0].Cause != "primary_changed" || !strings.Contains(got[0].Summary, "timeline 2") ||
		!strings.HasSuffix(got[0].Runbook, "#throttledprimarychanged") {
		t.Fatalf("active pages %+v; want one primary_changed page, naming the new timeline, with its runbook section", got)
	}
	p.Decision(Decision{At: t0.Add(PrimaryChangedFor - time.Second), Mode: status.ModeRunning})
	if len(p.Active()) != 1 {
		t.Fatal("the page resolved before PrimaryChangedFor")
	}
	p.Decision(Decision{At: t0.Add(PrimaryChangedFor), Mode: status.ModeRunning})
	if got := p.Active(); len(got) != 0 {
		t.Fatalf("active pages %+v after PrimaryChangedFor; want none", got)
	}
}
