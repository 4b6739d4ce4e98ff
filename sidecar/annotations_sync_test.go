package sidecar_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

// activeHold is an active manual hold on job, made now and lasting ttl.
func activeHold(id, job string, ttl time.Duration) hold.Hold {
	now := time.Now()
	return hold.Hold{ID: id, Scope: hold.OneJob(job), Source: hold.SourceManual,
		Reason: "testing", Actor: "alice", Created: now, Expires: now.Add(ttl)}
}

// A cluster whose holds came and went in the last two days (a flapping
// Grafana alert makes a new hold each time it fires) has many closed
// regions in Grafana, some 140 KiB of them here. Adoption asks only for
// the regions still open, so the leader goes on pushing.
func TestAdoptSurvivesManyClosedRegions(t *testing.T) {
	const token = "glsa_test_token_0123456789"
	g := &fakeGrafana{token: token, byID: map[int64]map[string]any{}}
	now := time.Now()
	// 150 regions of holds that ended during the last day, with the kind
	// of text create writes (a Grafana alert's summary as the reason).
	summary := strings.Repeat("primary load above target for 10m on db1; see runbook ", 6)
	for i := range 150 {
		g.next++
		start := now.Add(-24 * time.Hour).Add(time.Duration(i) * 5 * time.Minute)
		g.byID[g.next] = map[string]any{
			"id": float64(g.next), "time": float64(start.UnixMilli()), "timeEnd": float64(start.Add(3 * time.Minute).UnixMilli()),
			"tags": []any{"throttled", "cluster:db1", fmt.Sprintf("hold:h%d", 1000+i), "source:grafana-alert", "scope:job:purge"},
			"text": fmt.Sprintf("throttled: grafana-alert hold h%d on job:purge by grafana/HighLoad: %s", 1000+i, summary),
		}
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	active := []hold.Hold{activeHold("h5000", "purge", 10*time.Minute)}
	a := sidecar.NewAnnotations(srv.URL, token, "db1", func() []hold.Hold { return active }, func() bool { return true }, nil)
	err := a.Sync(context.Background())
	if _, _, _, n := g.region("h5000"); err != nil || n != 1 {
		pushed, failed := a.Counts()
		t.Fatalf("Sync with 150 closed regions in Grafana: %v; %d regions for the active hold (calls counted ok %d, failed %d)", err, n, pushed, failed)
	}
}

// A call whose answer cannot be read is a failed call, not an ok one.
func TestUnreadableAnswerCountsAsFailed(t *testing.T) {
	const token = "glsa_test_token_0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id": 1`)) // 200, cut short
	}))
	defer srv.Close()
	active := []hold.Hold{activeHold("h1", "purge", 10*time.Minute)}
	a := sidecar.NewAnnotations(srv.URL, token, "db1", func() []hold.Hold { return active }, func() bool { return true }, nil)
	if err := a.Sync(context.Background()); err == nil {
		t.Fatal("Sync succeeded against an unreadable answer")
	}
	if pushed, failed := a.Counts(); failed == 0 {
		t.Fatalf("an unreadable answer counted as ok (ok %d, failed %d): throttled_annotations_requests_total{result=\"failed\"} never moves", pushed, failed)
	}
}

// A region someone deleted in Grafana (annotations can be deleted in the
// UI) answers its PATCH with 404: the pusher forgets it rather than
// failing every later sync on it.
func TestDeletedRegionDoesNotWedgeSync(t *testing.T) {
	const token = "glsa_test_token_0123456789"
	g := &fakeGrafana{token: token, byID: map[int64]map[string]any{}}
	srv := httptest.NewServer(g)
	defer srv.Close()
	var mu sync.Mutex
	active := []hold.Hold{activeHold("h1", "purge", 10*time.Minute)}
	holdsNow := func() []hold.Hold { mu.Lock(); defer mu.Unlock(); return append([]hold.Hold(nil), active...) }
	a := sidecar.NewAnnotations(srv.URL, token, "db1", holdsNow, func() bool { return true }, nil)
	ctx := context.Background()
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// A person deletes h1's region in Grafana; then h1 is released.
	g.mu.Lock()
	for id := range g.byID {
		delete(g.byID, id)
	}
	g.mu.Unlock()
	mu.Lock()
	active = nil
	mu.Unlock()
	var errs []error
	for range 5 {
		if err := a.Sync(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 5 {
		t.Fatalf("Sync fails forever once a region is gone from Grafana: %v", errs[len(errs)-1])
	}
}

// A password in grafana.url never reaches the log: Run's warnings name the
// URL without it.
func TestGrafanaURLPasswordNotLogged(t *testing.T) {
	const secret = "proxy-password-0123456789"
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &logs, mu: &logMu}, Level: hclog.Debug})
	// Nothing listens on port 1: every call fails and is logged.
	a := sidecar.NewAnnotations("http://throttled:"+secret+"@127.0.0.1:1", "glsa_token_0123456789", "db1",
		func() []hold.Hold { return nil }, func() bool { return true }, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx, 10*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	pgtest.Eventually(t, 10*time.Second, func() error {
		logMu.Lock()
		defer logMu.Unlock()
		if !strings.Contains(logs.String(), "cannot push holds") {
			return fmt.Errorf("no failure logged yet")
		}
		return nil
	})
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if strings.Contains(out, secret) {
		t.Fatalf("the password in grafana.url reached the log: %s", out)
	}
}
