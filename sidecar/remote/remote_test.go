package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A sidecar shedding load: every acquire answers 503 with Retry-After 2.
// The client honours it, backs off, and gives up after MaxAttempts: a
// thousand workers cannot turn an outage into a retry storm.
func TestHonoursRetryAfterAndCapsAttempts(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	var mu sync.Mutex
	var waits []time.Duration
	c, err := New(Config{BaseURL: srv.URL, Token: "t", MaxAttempts: 4, sleep: func(_ context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Pacer("purge").Wait(context.Background())
	if !errors.Is(err, ErrGaveUp) {
		t.Fatalf("Wait: %v; want ErrGaveUp", err)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d requests; want MaxAttempts = 4", n)
	}
	if len(waits) != 3 {
		t.Fatalf("waits %v", waits)
	}
	for _, d := range waits {
		if d < 2*time.Second {
			t.Fatalf("waited %s, less than Retry-After 2s", d)
		}
	}
}

// Throttled (429) is pacing: the client waits as told and asks again, and
// a success returns a reporter that reports once.
func TestThrottledWaitsThenSucceedsAndReports(t *testing.T) {
	var acquires, reports atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v1/jobs/purge/acquire":
			if acquires.Add(1) < 3 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.Write([]byte(`{"tokens":["tok1"],"rate":2}`))
		case "/v1/jobs/purge/report":
			reports.Add(1)
			w.Write([]byte(`{"reported":true}`))
		}
	}))
	defer srv.Close()
	var slept time.Duration
	c, _ := New(Config{BaseURL: srv.URL, Token: "secret", MaxAttempts: 1, sleep: func(_ context.Context, d time.Duration) error {
		slept += d
		return nil
	}})
	done, err := c.Pacer("purge").Wait(context.Background())
	if err != nil {
		t.Fatalf("Wait: %v (429s must not count as failures)", err)
	}
	if acquires.Load() != 3 || slept < 2*time.Second {
		t.Fatalf("%d acquires, slept %s", acquires.Load(), slept)
	}
	done(10, time.Second, nil)
	if reports.Load() != 1 {
		t.Fatalf("%d reports", reports.Load())
	}
	bad, _ := New(Config{BaseURL: srv.URL, Token: "wrong"})
	if _, err := bad.Pacer("purge").Wait(context.Background()); err == nil || errors.Is(err, ErrGaveUp) {
		t.Fatalf("401 must fail at once, not retry: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{BaseURL: "not a url", Token: "t"}); err == nil {
		t.Fatal("bad URL accepted")
	}
	if _, err := New(Config{BaseURL: "http://x"}); err == nil {
		t.Fatal("missing token accepted")
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("THROTTLED_ADDR", "http://127.0.0.1:18087")
	t.Setenv("THROTTLED_TOKEN", "worker-token")
	if c := ConfigFromEnv(); c.BaseURL != "http://127.0.0.1:18087" || c.Token != "worker-token" {
		t.Errorf("ConfigFromEnv() = %+v", c)
	}
}
