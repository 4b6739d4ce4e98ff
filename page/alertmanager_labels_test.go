package page

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Two jobs that do not honour a pause are two pages, and Alertmanager,
// which identifies an alert by its label set, sees two: the job is a
// label, so resolving one job's page leaves the other's.
func TestAlertmanagerUnhonouredJobsHaveDistinctLabels(t *testing.T) {
	var mu sync.Mutex
	var labels []map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var alerts []struct {
			Labels map[string]string `json:"labels"`
		}
		_ = json.Unmarshal(raw, &alerts)
		mu.Lock()
		for _, a := range alerts {
			labels = append(labels, a.Labels)
		}
		mu.Unlock()
	}))
	defer srv.Close()
	am := Alertmanager{URL: srv.URL}
	ctx := context.Background()
	// What Pager.Unhonoured makes for two jobs.
	p := New(Config{Cluster: "postgres"})
	p.Unhonoured(t0, map[string]string{"jobA": "jobA works under a hold", "jobB": "jobB works under a hold"})
	var a, b Alert
	for len(p.queue) > 0 {
		switch x := <-p.queue; x.Job {
		case "jobA":
			a = x
		case "jobB":
			b = x
		}
	}
	if a.Key == "" || b.Key == "" || !a.Firing || !b.Firing {
		t.Fatalf("Unhonoured queued %+v and %+v", a, b)
	}
	for _, x := range []Alert{a, b} {
		if err := am.Notify(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(labels) != 2 {
		t.Fatalf("got %d alerts", len(labels))
	}
	if maps.Equal(labels[0], labels[1]) {
		t.Fatalf("pages for jobA and jobB carry identical Alertmanager labels %v: they are one alert, and resolving jobA resolves jobB", labels[0])
	}
}
