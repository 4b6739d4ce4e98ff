package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/throttled/throttled/jobs"
)

// One Pacer shared by two workers of a job: each report carries its own
// batch's details, whatever order the batches finish in (A's first
// attempt is no retry, B's third is).
func TestProgressGoesWithItsOwnBatch(t *testing.T) {
	var mu sync.Mutex
	reports := map[string]map[string]any{} // by token
	next := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		switch r.URL.Path {
		case "/v1/jobs/purge/acquire":
			next++
			json.NewEncoder(w).Encode(map[string]any{"tokens": []string{fmt.Sprintf("t%d", next)}})
		case "/v1/jobs/purge/report":
			reports[body["token"].(string)] = body
			w.Write([]byte(`{"reported":true}`))
		}
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pacer("purge")
	ctx := context.Background()
	doneA, err := p.WaitProgress(ctx) // token t1: worker A's first attempt
	if err != nil {
		t.Fatal(err)
	}
	doneB, err := p.WaitProgress(ctx) // token t2: worker B's third attempt
	if err != nil {
		t.Fatal(err)
	}
	var _ jobs.Progresser = p
	// B finishes first; each report carries its own batch's details.
	doneB(0, time.Millisecond, fmt.Errorf("deadlock detected"), jobs.Progress{BatchSize: 7, Attempt: 3, Remaining: 50})
	doneA(100, time.Millisecond, nil, jobs.Progress{BatchSize: 100, Attempt: 1, Remaining: 900})
	mu.Lock()
	defer mu.Unlock()
	a, b := reports["t1"], reports["t2"]
	// retry is omitted when false.
	if a["batch_size"] != float64(100) || a["retry"] != nil || b["batch_size"] != float64(7) || b["retry"] != true {
		t.Fatalf("A's report %v; B's report %v: each batch's details should go with its own report", a, b)
	}
}
