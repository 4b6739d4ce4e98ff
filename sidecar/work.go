package sidecar

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle"
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
	job string
	at  time.Time
	// worker names who holds it, for the job's reason; maxBatch is the
	// job's max_batch_size when it was granted (0: none), which bounds
	// the rows its report may claim.
	worker   string
	maxBatch int
	done     func(rows int64, took time.Duration, err error)
}

// GrantTTL is how long a remote worker may hold a token before it is
// reported for it, as failed. Until then the token's in-flight slot is
// taken: while tokens are unreported and the job's acquires go wanting,
// the job's reason and the acquire's 429 name them, by worker, with their
// age and the time left (grantsReason).
const GrantTTL = 5 * time.Minute

// staleGrant is how long a token may go unreported before the job's
// reason names it even while acquires are served: six times a batch's
// default statement timeout, so its worker has most likely died.
const staleGrant = 30 * time.Second

// maxWorkerName bounds an acquire's worker name.
const maxWorkerName = 64

// maxReportRows bounds a batch's rows when neither its batch_size nor the
// job's max_batch_size does: a billion rows is past any batch a statement
// timeout lets finish, and keeps a counter summed from reports far from
// overflowing.
const maxReportRows = 1_000_000_000

// addRows adds n rows to a running total, saturating at math.MaxInt64: a
// counter never wraps to negative.
func addRows(total, n int64) int64 {
	if n <= 0 {
		return total
	}
	if total > math.MaxInt64-n {
		return math.MaxInt64
	}
	return total + n
}

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
	if len(req.Worker) > maxWorkerName || !utf8.ValidString(req.Worker) || strings.IndexFunc(req.Worker, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return 0, fmt.Errorf("worker %q: at most %d printable characters (a host or pod name)", req.Worker, maxWorkerName)
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

// checkReportRows refuses a report whose rows (or batch_size) exceed
// what the batch could hold: its batch_size when given, else the job's
// max_batch_size when the token was granted (maxBatch, 0 for none), else
// maxReportRows. A counter summed from reports must never be driven past
// what the work could have done.
func checkReportRows(req api.ReportRequest, maxBatch int) error {
	limit, what := int64(maxReportRows), fmt.Sprintf("%d, the most a batch could hold", int64(maxReportRows))
	if maxBatch > 0 {
		limit, what = int64(maxBatch), fmt.Sprintf("%d, the job's max_batch_size when the token was granted", maxBatch)
	}
	if int64(req.BatchSize) > limit {
		return fmt.Errorf("batch_size = %d: at most %s", req.BatchSize, what)
	}
	if req.BatchSize > 0 {
		limit, what = int64(req.BatchSize), fmt.Sprintf("%d, the batch_size reported with it", req.BatchSize)
	}
	if req.Rows > limit {
		return fmt.Errorf("rows = %d: more than the batch could hold; at most %s", req.Rows, what)
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
func (s *Server) acquire(w http.ResponseWriter, r *http.Request, tok config.Token) {
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
	worker := cmp.Or(req.Worker, "token "+tok.Name)
	resp := api.AcquireResponse{Tokens: []string{}, Batch: s.batchBounds(job), TokenTTLSeconds: GrantTTL.Seconds()}
	maxBatch := 0
	if resp.Batch != nil {
		maxBatch = resp.Batch.MaxSize
	}
	var waitErr error
	for range req.N {
		done, err := p.Wait(ctx)
		if err != nil {
			waitErr = err
			break
		}
		id := newGrantID()
		s.gmu.Lock()
		s.grants[id] = &grant{job: job, at: time.Now(), worker: worker, maxBatch: maxBatch, done: done}
		delete(s.starved, job)
		s.gmu.Unlock()
		resp.Tokens = append(resp.Tokens, id)
	}
	st := p.Status()
	reason, rate := st.Reason, st.Rate
	resp.Rate = rate
	if len(resp.Tokens) == 0 {
		// Unreported tokens hold in-flight slots: say whose, so a 429 on
		// a job that reads running is never without a why.
		s.gmu.Lock()
		if waitErr != nil && strings.Contains(waitErr.Error(), "in-flight slot") {
			s.starved[job] = true
		}
		held := s.grantsReasonLocked(job, time.Now())
		s.gmu.Unlock()
		switch {
		case held != "" && reason != "":
			reason += "; " + held
		case held != "":
			reason = held
		case reason == "" && waitErr != nil:
			reason = waitErr.Error()
		}
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

// grantsReasonLocked says which tokens of job are unreported at now, by
// worker, the oldest first: "waiting for 1 unreported grant from worker
// w1 (acquired 42s ago, expires in 4m18s)"; "" when none is. The caller
// holds gmu.
func (s *Server) grantsReasonLocked(job string, now time.Time) string {
	type held struct {
		worker string
		n      int
		oldest time.Time
	}
	var by []*held
	total := 0
	for _, g := range s.grants {
		if g.job != job || now.Sub(g.at) > GrantTTL {
			continue
		}
		total++
		i := slices.IndexFunc(by, func(h *held) bool { return h.worker == g.worker })
		if i < 0 {
			by = append(by, &held{worker: g.worker, oldest: g.at})
			i = len(by) - 1
		}
		by[i].n++
		if g.at.Before(by[i].oldest) {
			by[i].oldest = g.at
		}
	}
	if total == 0 {
		return ""
	}
	slices.SortFunc(by, func(a, b *held) int { return cmp.Or(a.oldest.Compare(b.oldest), strings.Compare(a.worker, b.worker)) })
	ages := func(h *held) string {
		return fmt.Sprintf("acquired %s ago, expires in %s", now.Sub(h.oldest).Round(time.Second), h.oldest.Add(GrantTTL).Sub(now).Round(time.Second))
	}
	plural := func(n int) string {
		if n == 1 {
			return "1 unreported grant"
		}
		return fmt.Sprintf("%d unreported grants", n)
	}
	if len(by) == 1 {
		h := by[0]
		if h.n > 1 {
			return fmt.Sprintf("waiting for %s from worker %s (the oldest %s)", plural(h.n), h.worker, ages(h))
		}
		return fmt.Sprintf("waiting for %s from worker %s (%s)", plural(h.n), h.worker, ages(h))
	}
	parts := make([]string, 0, 4)
	shown := 0
	for i, h := range by {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more from %d other workers", total-shown, len(by)-3))
			break
		}
		shown += h.n
		parts = append(parts, fmt.Sprintf("%d from worker %s (the oldest %s)", h.n, h.worker, ages(h)))
	}
	return fmt.Sprintf("waiting for %s: %s", plural(total), strings.Join(parts, ", "))
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
		if err := checkReportRows(req, g.maxBatch); err != nil {
			s.gmu.Unlock()
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		delete(s.grants, req.Token)
		t := s.reports[g.job]
		if t == nil {
			t = &reportTotals{remaining: -1}
			s.reports[g.job] = t
		}
		t.batches++
		t.rows = addRows(t.rows, req.Rows)
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

// grantPacer is a job's pacer as the API shows it: while the job may run
// yet its remote workers' unreported tokens hold the slots its acquires
// want (or one has gone unreported past staleGrant), its status's reason
// names them, so GET /v1/jobs/{job} never says "running" with no why while
// acquire answers 429.
type grantPacer struct {
	throttled.Pacer
	s   *Server
	job string
}

func (p grantPacer) Status() throttle.JobStatus {
	st := p.Pacer.Status()
	if !st.Code.Go() {
		return st // paused: its own reason says why
	}
	if held := p.s.heldGrants(p.job, time.Now()); held != "" {
		if st.Reason == "" {
			st.Reason = held
		} else {
			st.Reason += "; " + held
		}
	}
	return st
}

// heldGrants is grantsReasonLocked's words for job when its acquires went
// wanting for a slot or one of its tokens is older than staleGrant; ""
// otherwise, as tokens between acquire and report are a job's ordinary
// work.
func (s *Server) heldGrants(job string, now time.Time) string {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	stale := false
	for _, g := range s.grants {
		if g.job == job && now.Sub(g.at) > staleGrant && now.Sub(g.at) <= GrantTTL {
			stale = true
			break
		}
	}
	if !stale && !s.starved[job] {
		return ""
	}
	return s.grantsReasonLocked(job, now)
}

// withGrants wraps a job's pacer so its status names unreported tokens.
func (s *Server) withGrants(job string, p throttled.Pacer) throttled.Pacer {
	if _, ok := p.(grantPacer); ok {
		return p
	}
	return grantPacer{Pacer: p, s: s, job: job}
}
