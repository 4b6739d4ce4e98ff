package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle"
)

// benchClients is how many clients the load generator runs at once, each
// with its own keep-alive connection over loopback.
const benchClients = 8

// benchServer runs the real sidecar handler (coordinated client, one job
// a with a budget far above what the load generator can take) and returns
// its URL once /check/a says go. It is closed when the benchmark ends.
func benchServer(b *testing.B) string {
	b.Helper()
	c := pgtest.Cluster(b)
	client, err := throttled.Open(context.Background(), throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true, Controller: throttle.Config{MaxBudget: 1e6, InitialBudget: 1e6}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	cfg := configWith("v1", config.Job{Name: "a", Weight: 1})
	cfg.MaxConcurrent = 4 * benchClients
	cfg.Tokens = []config.Token{{Name: "worker", Secret: workToken, Scopes: []config.Scope{config.ScopeWork}}}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	hc := newBenchClient(b)
	pgtest.Eventually(b, 20*time.Second, func() error {
		if _, err := benchCheck(hc, hs.URL); err != nil {
			return err
		}
		return nil
	})
	return hs.URL
}

// bareServer runs a bare net/http handler on the same routes, writing
// bodies like the sidecar's: the anchor of the sidecar benchmarks.
func bareServer(b *testing.B) string {
	b.Helper()
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /check/{job}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"status": 200, "message": "go", "job": r.PathValue("job"), "rate": 1e6})
	})
	mux.HandleFunc("POST /v1/jobs/{job}/acquire", func(w http.ResponseWriter, r *http.Request) {
		var req api.AcquireRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, api.AcquireResponse{Tokens: []string{"0123456789abcdef01234567"}, Rate: 1e6})
	})
	mux.HandleFunc("POST /v1/jobs/{job}/report", func(w http.ResponseWriter, r *http.Request) {
		var req api.ReportRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]any{"reported": true})
	})
	hs := httptest.NewServer(mux)
	b.Cleanup(hs.Close)
	return hs.URL
}

func newBenchClient(b *testing.B) *http.Client {
	tr := &http.Transport{MaxIdleConns: benchClients, MaxIdleConnsPerHost: benchClients}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// benchCheck asks /check/a once and returns how long the request took.
func benchCheck(hc *http.Client, base string) (time.Duration, error) {
	start := time.Now()
	resp, err := hc.Get(base + "/check/a")
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/check/a: %s", resp.Status)
	}
	return took, nil
}

// post sends body to path with the work token and decodes a 200's body
// into out.
func post(hc *http.Client, url, body string, out any) error {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+workToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, bytes.TrimSpace(raw))
	}
	return json.Unmarshal(raw, out)
}

// benchAcquire takes one token and reports it (a batch of 50 ms, so the
// job's in-flight cap grows past the clients), and returns how long the
// acquire request took.
func benchAcquire(hc *http.Client, base string) (time.Duration, error) {
	start := time.Now()
	var got api.AcquireResponse
	if err := post(hc, base+"/v1/jobs/a/acquire", `{"n":1,"max_wait":"1s"}`, &got); err != nil {
		return 0, err
	}
	took := time.Since(start)
	if len(got.Tokens) != 1 {
		return 0, fmt.Errorf("acquire granted %d tokens", len(got.Tokens))
	}
	var rep struct{ Reported bool }
	body := fmt.Sprintf(`{"token":%q,"rows":1,"duration_ms":50}`, got.Tokens[0])
	if err := post(hc, base+"/v1/jobs/a/report", body, &rep); err != nil {
		return 0, err
	}
	if !rep.Reported {
		return 0, errors.New("report not taken")
	}
	return took, nil
}

// load runs op b.N times from benchClients goroutines and reports
// operations a second and the 99th percentile of op's latency.
func load(b *testing.B, base string, op func(*http.Client, string) (time.Duration, error)) {
	hc := newBenchClient(b)
	work := make(chan struct{})
	lat := make([][]time.Duration, benchClients)
	errs := make(chan error, benchClients)
	var wg sync.WaitGroup
	for i := range benchClients {
		wg.Go(func() {
			for range work {
				d, err := op(hc, base)
				if err != nil {
					errs <- err
					for range work {
					}
					return
				}
				lat[i] = append(lat[i], d)
			}
		})
	}
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
}

// BenchmarkCheck is GET /check/{job} on the real sidecar handler.
func BenchmarkCheck(b *testing.B) {
	load(b, benchServer(b), benchCheck)
}

// BenchmarkCheckAnchor is BenchmarkCheck against a bare handler.
func BenchmarkCheckAnchor(b *testing.B) {
	load(b, bareServer(b), benchCheck)
}

// BenchmarkAcquire is POST /v1/jobs/{job}/acquire on the real sidecar
// handler, each token reported at once; p99 is the acquire's.
func BenchmarkAcquire(b *testing.B) {
	base := benchServer(b)
	// Warm up until the job's in-flight cap (from the reported batch
	// durations) lets every client hold a token at once.
	hc := newBenchClient(b)
	pgtest.Eventually(b, 30*time.Second, func() error {
		var wg sync.WaitGroup
		slow := make(chan time.Duration, benchClients)
		for range benchClients {
			wg.Go(func() {
				for range 10 {
					if d, err := benchAcquire(hc, base); err != nil || d > 20*time.Millisecond {
						slow <- d
						return
					}
				}
			})
		}
		wg.Wait()
		close(slow)
		if d, ok := <-slow; ok {
			return fmt.Errorf("an acquire took %s: the in-flight cap is still below %d", d, benchClients)
		}
		return nil
	})
	load(b, base, benchAcquire)
}

// BenchmarkAcquireAnchor is BenchmarkAcquire against a bare handler.
func BenchmarkAcquireAnchor(b *testing.B) {
	load(b, bareServer(b), benchAcquire)
}
