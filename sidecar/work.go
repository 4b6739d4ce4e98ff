package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/sidecar/api"
)

// reportTotals sums remote workers' reports for one job.
type reportTotals struct {
	batches, rows, errors, retries int64
	batchSize                      int
	remaining                      int64 // -1: never reported
}

// grant is a token a remote worker holds: its in-flight slot stays taken
// until the worker reports, or the grant expires.
type grant struct {
	job  string
	at   time.Time
	done func(rows int64, took time.Duration, err error)
}

// GrantTTL is how long a remote worker may hold a token before it is
// reported for it, as failed.
const GrantTTL = 5 * time.Minute

// parseAcquire checks an acquire request, settles N (1 when absent) and
// returns how long to wait for the tokens.
func parseAcquire(req *api.AcquireRequest) (time.Duration, error) {
	if req.N < 0 {
		return 0, fmt.Errorf("n = %d: want 1 to 100 tokens (0 or absent means 1)", req.N)
	}
	req.N = max(req.N, 1)
	wait := time.Second
	if req.MaxWait != "" {
		d, err := time.ParseDuration(req.MaxWait)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("max_wait %q: want a duration such as 2s", req.MaxWait)
		}
		wait = min(d, 10*time.Second)
	}
	if req.N > 100 {
		return 0, fmt.Errorf("n = %d: at most 100 tokens a request", req.N)
	}
	return wait, nil
}

// maxReportMs bounds a reported batch duration.
const maxReportMs = 24 * 60 * 60 * 1000

// checkReport refuses negative, non-finite or impossible numbers.
func checkReport(req api.ReportRequest) error {
	if req.Rows < 0 || req.DurationMs < 0 || math.IsNaN(req.DurationMs) || math.IsInf(req.DurationMs, 0) || req.BatchSize < 0 || (req.Remaining != nil && *req.Remaining < 0) {
		return errors.New("rows, duration_ms, batch_size and remaining must not be negative")
	}
	// A batch is bounded by its statement timeout; a day is far past any,
	// and keeps the duration within time.Duration.
	if req.DurationMs > maxReportMs {
		return fmt.Errorf("duration_ms = %g: at most %d (a day)", req.DurationMs, int64(maxReportMs))
	}
	return nil
}

// batchBounds returns job's configured batch bounds, or nil if none is
// set.
func (s *Server) batchBounds(job string) *api.BatchBounds {
	for _, j := range s.config().Jobs {
		if j.Name != job {
			continue
		}
		if j.MinBatchSize == 0 && j.MaxBatchSize == 0 && j.TargetBatchDuration == 0 {
			return nil
		}
		return &api.BatchBounds{MinSize: j.MinBatchSize, MaxSize: j.MaxBatchSize,
			TargetDurationMs: float64(j.TargetBatchDuration) / float64(time.Millisecond)}
	}
	return nil
}

func (s *Server) reported(job string) reportTotals {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if r := s.reports[job]; r != nil {
		return *r
	}
	return reportTotals{remaining: -1}
}

// acquire grants up to n tokens within max_wait, each holding an
// in-flight slot until reported. None granted is 429 with Retry-After: a
// remote worker waits like a local one, and never faster.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request, _ config.Token) {
	var req api.AcquireRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	wait, err := parseAcquire(&req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	job := r.PathValue("job")
	s.mu.RLock()
	p, ok := s.pacers[job]
	s.mu.RUnlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no job %q is configured", job))
		return
	}
	s.expireGrants()
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	start := time.Now()
	defer func() { s.wait.WithLabelValues(job).Observe(time.Since(start).Seconds()) }()
	resp := api.AcquireResponse{Tokens: []string{}}
	for range req.N {
		done, err := p.Wait(ctx)
		if err != nil {
			break
		}
		id := newGrantID()
		s.gmu.Lock()
		s.grants[id] = &grant{job: job, at: time.Now(), done: done}
		s.gmu.Unlock()
		resp.Tokens = append(resp.Tokens, id)
	}
	_, reason, _, rate := p.Explain()
	resp.Rate, resp.Batch = rate, s.batchBounds(job)
	if len(resp.Tokens) == 0 {
		retry := 1
		if rate > 0 {
			retry = max(1, int(math.Ceil(1/rate)))
		}
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		writeJSON(w, http.StatusTooManyRequests, api.Throttled{Error: "no token within max_wait", Reason: reason, Rate: rate})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) report(w http.ResponseWriter, r *http.Request, _ config.Token) {
	var req api.ReportRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := checkReport(req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.gmu.Lock()
	g, ok := s.grants[req.Token]
	if ok && g.job == r.PathValue("job") {
		delete(s.grants, req.Token)
		t := s.reports[g.job]
		if t == nil {
			t = &reportTotals{remaining: -1}
			s.reports[g.job] = t
		}
		t.batches++
		t.rows += req.Rows
		if req.Error != "" {
			t.errors++
		}
		if req.Retry {
			t.retries++
		}
		if req.BatchSize > 0 {
			t.batchSize = req.BatchSize
		}
		if req.Remaining != nil {
			t.remaining = *req.Remaining
		}
	}
	s.gmu.Unlock()
	if !ok || g.job != r.PathValue("job") {
		writeError(w, http.StatusNotFound, "unknown or already reported token for this job")
		return
	}
	var err error
	if req.Error != "" {
		err = errors.New(req.Error)
	}
	g.done(req.Rows, time.Duration(req.DurationMs*float64(time.Millisecond)), err)
	writeJSON(w, http.StatusOK, api.ReportAnswer{Reported: true})
}

// expireGrants reports tokens held past GrantTTL as failed, freeing their
// slots: a worker that died does not hold the job's capacity forever.
func (s *Server) expireGrants() {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	for id, g := range s.grants {
		if age := time.Since(g.at); age > GrantTTL {
			g.done(0, age, errors.New("token not reported within the grant TTL"))
			delete(s.grants, id)
		}
	}
}

func newGrantID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
