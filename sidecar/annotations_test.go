package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

// fakeGrafana keeps annotations the way Grafana's HTTP API does, for the
// calls the sidecar makes: POST /api/annotations, PATCH
// /api/annotations/{id}, and GET /api/annotations?tags=…&from=…&to=…
// (every tag must match; the annotation must overlap the range). Grafana
// itself is not installable here.
type fakeGrafana struct {
	mu       sync.Mutex
	token    string
	next     int64
	byID     map[int64]map[string]any
	failNext int // answer this many requests with 503
	calls    int
}

func (g *fakeGrafana) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if r.Header.Get("Authorization") != "Bearer "+g.token {
		http.Error(w, `{"message":"invalid API key"}`, http.StatusUnauthorized)
		return
	}
	if g.failNext > 0 {
		g.failNext--
		http.Error(w, `{"message":"database is locked"}`, http.StatusServiceUnavailable)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/annotations":
		var a map[string]any
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.next++
		a["id"] = float64(g.next)
		g.byID[g.next] = a
		json.NewEncoder(w).Encode(map[string]any{"message": "Annotation added", "id": g.next})
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/api/annotations/"):
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/api/annotations/"), 10, 64)
		a, ok := g.byID[id]
		if !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		var patch map[string]any
		json.NewDecoder(r.Body).Decode(&patch)
		for k, v := range patch {
			a[k] = v
		}
		json.NewEncoder(w).Encode(map[string]any{"message": "Annotation patched"})
	case r.Method == http.MethodGet && r.URL.Path == "/api/annotations":
		want := r.URL.Query()["tags"]
		// Grafana's range filter: epoch <= to AND epoch_end >= from.
		from, _ := strconv.ParseFloat(r.URL.Query().Get("from"), 64)
		to, _ := strconv.ParseFloat(r.URL.Query().Get("to"), 64)
		out := []map[string]any{}
		for _, a := range g.byID {
			if to > 0 && (a["time"].(float64) > to || a["timeEnd"].(float64) < from) {
				continue
			}
			var tags []string
			for _, t := range a["tags"].([]any) {
				tags = append(tags, t.(string))
			}
			if !slices.ContainsFunc(want, func(t string) bool { return !slices.Contains(tags, t) }) {
				out = append(out, a)
			}
		}
		json.NewEncoder(w).Encode(out)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
	}
}

// region is the annotation of hold id: its start and end, and how many
// annotations carry the hold's tag.
func (g *fakeGrafana) region(id string) (start, end time.Time, text string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.byID {
		for _, t := range a["tags"].([]any) {
			if t == "hold:"+id {
				n++
				start, end = time.UnixMilli(int64(a["time"].(float64))), time.UnixMilli(int64(a["timeEnd"].(float64)))
				text, _ = a["text"].(string)
			}
		}
	}
	return start, end, text, n
}

// Holds become regions in Grafana, cut short on release; a new pusher
// adopts open regions instead of making them twice and closes one whose
// hold ended while nobody pushed; a failing Grafana is retried, and the
// token never reaches the log.
func TestHoldsArePushedToGrafanaAsRegions(t *testing.T) {
	ctx := context.Background()
	client, _ := coordinatedClient(t)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if !client.Leader() {
			return fmt.Errorf("not the leader yet")
		}
		return nil
	})
	const token = "glsa_test_service_account_token_0123"
	g := &fakeGrafana{token: token, byID: map[int64]map[string]any{}, failNext: 3}
	srv := httptest.NewServer(g)
	defer srv.Close()
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &logs, mu: &logMu}, Level: hclog.Debug})
	start := func() context.CancelFunc {
		a := sidecar.NewAnnotations(srv.URL, token, "db1", client.HoldWatcher().Active, client.Leader, log)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { a.Run(rctx, 50*time.Millisecond); close(done) }()
		return func() { cancel(); <-done }
	}
	stop := start()
	store := client.DurableHolds().Holds()
	add := func(job, reason string) hold.Hold {
		h, err := store.Add(ctx, hold.Request{Scope: hold.OneJob(job), Source: hold.SourceManual, Reason: reason, Actor: "alice", TTL: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Release(context.Background(), h.ID, "test", hold.SourceManual, "cleanup") })
		return h
	}
	oneRegion := func(id string) {
		t.Helper()
		pgtest.Eventually(t, 15*time.Second, func() error {
			if _, _, _, n := g.region(id); n != 1 {
				return fmt.Errorf("%d regions for hold %s", n, id)
			}
			return nil
		})
	}
	h1 := add("ann-a", "vacuum first")
	oneRegion(h1.ID)
	s, e, text, _ := g.region(h1.ID)
	if !s.Equal(h1.Created.Truncate(time.Millisecond)) || !e.Equal(h1.Expires.Truncate(time.Millisecond)) || !strings.Contains(text, "vacuum first") || !strings.Contains(text, "alice") {
		t.Fatalf("region %s-%s %q; want the hold's %s-%s, reason and actor", s, e, text, h1.Created, h1.Expires)
	}
	// Released early: the region ends at the release, not the expiry.
	if _, err := store.Release(ctx, h1.ID, "bob", hold.SourceManual, "done"); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	pgtest.Eventually(t, 15*time.Second, func() error {
		if _, e, _, _ := g.region(h1.ID); e.After(released.Add(5 * time.Second)) {
			return fmt.Errorf("region of released hold %s still ends at %s", h1.ID, e)
		}
		return nil
	})
	// A hold made and released while no pusher runs, and one made and
	// kept: the next pusher closes the first and makes only the second.
	h2 := add("ann-b", "kept open while nobody pushes")
	oneRegion(h2.ID)
	stop()
	if _, err := store.Release(ctx, h2.ID, "bob", hold.SourceManual, "done"); err != nil {
		t.Fatal(err)
	}
	h3 := add("ann-c", "made while nobody pushes")
	releasedH2 := time.Now()
	stop = start()
	defer stop()
	pgtest.Eventually(t, 15*time.Second, func() error {
		_, e2, _, n2 := g.region(h2.ID)
		_, _, _, n3 := g.region(h3.ID)
		if n2 != 1 || n3 != 1 || e2.After(releasedH2.Add(5*time.Second)) {
			return fmt.Errorf("hold %s: %d regions ending %s; hold %s: %d regions", h2.ID, n2, e2, h3.ID, n3)
		}
		return nil
	})
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if !strings.Contains(out, "cannot push holds to Grafana") || !strings.Contains(out, "503") {
		t.Errorf("the first 503s were not logged: %s", out)
	}
	if strings.Contains(out, token) {
		t.Errorf("the service account token reached the log: %s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
