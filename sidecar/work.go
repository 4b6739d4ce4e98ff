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
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/status"
)

// reportTotals sums remote workers' reports for one job.
type reportTotals struct {
	batches, rows, errors, retries int64
	batchSize                      int
	remaining                      int64 // -1: never reported
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
// remote worker waits like a local one, and never faster. Tokens a
// previous run of this sidecar handed out take their slots again first.
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
	if err := s.adopt(r.Context(), job); err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	start := time.Now()
	defer func() { s.wait.WithLabelValues(job).Observe(time.Since(start).Seconds()) }()
	worker := cmp.Or(req.Worker, "token "+tok.Name)
	resp := api.AcquireResponse{Tokens: []string{}, Batch: s.batchBounds(job), TokenTTLSeconds: s.book.ttl.Seconds()}
	maxBatch := 0
	if resp.Batch != nil {
		maxBatch = resp.Batch.MaxSize
	}
	var waitErr error
	// The tokens out before a restart hold slots before any new one does:
	// the in-flight cap holds across the restart.
	for _, id := range s.book.slotless(job) {
		done, err := p.Wait(ctx)
		if err != nil {
			waitErr = err
			break
		}
		if !s.book.seat(id, done) {
			// Reported or expired while this waited: the slot is not
			// needed, and its release counts as a batch of no rows.
			done(0, 0, nil)
		}
	}
	for range req.N {
		if waitErr != nil {
			break
		}
		done, err := p.Wait(ctx)
		if err != nil {
			waitErr = err
			break
		}
		id := newGrantID()
		g := &grant{job: job, at: time.Now(), worker: worker, maxBatch: maxBatch, done: done}
		if err := s.recordGrant(r.Context(), id, g); err != nil {
			// A token the database does not know would be forgotten by a
			// restart: none is handed out.
			done(0, 0, err)
			waitErr = err
			s.log.Warn("token not handed out", "job", job, "error", err)
			break
		}
		s.book.add(id, g)
		s.gmu.Lock()
		delete(s.starved, job)
		s.gmu.Unlock()
		resp.Tokens = append(resp.Tokens, id)
	}
	if len(resp.Tokens) > 0 {
		resp.Rate = p.Status().Rate
		writeJSON(w, http.StatusOK, resp)
		return
	}
	var dbErr *grantDBError
	if errors.As(waitErr, &dbErr) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, waitErr.Error())
		return
	}
	// The job's own status, not the one that names the tokens already
	// (grantPacer): they are added once, here.
	st := p.Status()
	if gp, ok := p.(grantPacer); ok {
		st = gp.JobPacer.Status()
	}
	reason, rate := st.Reason, st.Rate
	// Unreported tokens hold in-flight slots: say whose, so a 429 on a
	// job that reads running is never without a why.
	if waitErr != nil && strings.Contains(waitErr.Error(), "in-flight slot") {
		s.gmu.Lock()
		s.starved[job] = true
		s.gmu.Unlock()
	}
	held := s.book.reason(job, time.Now())
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
}

// report counts one batch's outcome for its token, once: it is answered
// 200 only once the token's end is stored in throttled.grants, so no
// restart takes the token up as out again or accepts its report twice.
// While the end cannot be stored it is 503 with Retry-After, the token
// stays out and nothing is counted: the worker's retry stores it.
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
	job := r.PathValue("job")
	check := func(g *grant) error { return checkReportRows(req, g.maxBatch) }
	g, end, err := s.book.begin(req.Token, job, check)
	if end == tokenUnknown {
		// Not in memory: a token a previous run of this sidecar handed
		// out is in the database.
		if status, msg := s.lookupToken(r.Context(), req.Token, job); status != 0 {
			if status == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			writeError(w, status, msg)
			return
		}
		g, end, err = s.book.begin(req.Token, job, check)
	}
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case end == tokenBusy:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "sidecar: another report of this token is being stored: retry")
		return
	case end == tokenReported:
		writeError(w, http.StatusConflict, "token already reported for this job")
		return
	case end == tokenExpired:
		writeError(w, http.StatusGone, s.expiredMsg())
		return
	case g == nil:
		writeError(w, http.StatusNotFound, unknownTokenMsg)
		return
	}
	now, ended, ran, err := s.storeReported(r.Context(), req.Token)
	switch {
	case err != nil:
		s.book.abandon(req.Token, ran)
		s.log.Warn("report not stored: answered 503, for the worker to retry", "job", job, "error", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "sidecar: cannot store the report, nothing was counted: "+err.Error()+"; retry")
		return
	case now == store.GrantReported && !ended && !g.tried:
		// Reported elsewhere first (another sidecar under this one's
		// name, for a while): counted there.
		s.book.finish(req.Token, tokenReported)
		if g.done != nil {
			g.done(0, 0, nil)
		}
		writeError(w, http.StatusConflict, "token already reported for this job")
		return
	case now == store.GrantExpired && !ended:
		s.book.finish(req.Token, tokenExpired)
		if g.done != nil {
			g.done(0, g.expires.Sub(g.at), errTokenExpired)
		}
		writeError(w, http.StatusGone, s.expiredMsg())
		return
	}
	// Stored: by this statement, by an earlier one of this sidecar whose
	// answer was lost (tried), or there is no row to store it in.
	s.book.finish(req.Token, tokenReported)
	s.gmu.Lock()
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
	s.gmu.Unlock()
	if g.done != nil {
		var berr error
		if req.Error != "" {
			berr = errors.New(req.Error)
		}
		g.done(req.Rows, time.Duration(req.DurationMs*float64(time.Millisecond)), berr)
	}
	writeJSON(w, http.StatusOK, api.ReportAnswer{Reported: true})
}

// unknownTokenMsg refuses a report of a token neither this sidecar nor
// throttled.grants knows for the job.
var unknownTokenMsg = fmt.Sprintf("unknown token for this job: never granted, or expired more than %s ago (throttled.grants keeps a token that long)", fmtHours(grantKept))

// fmtHours writes d as "1h" rather than "1h0m0s".
func fmtHours(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimSuffix(d.String(), "0s"), "0m")
}

// lookupToken finds a token this run of the sidecar does not know in the
// database, and takes it up when a previous run handed it out and it is
// still out (0, ""); otherwise it returns the refusal: 404 unknown, 409
// another sidecar's or reported, 410 expired, 503 when it cannot tell.
func (s *Server) lookupToken(ctx context.Context, id, job string) (int, string) {
	lctx, cancel := context.WithTimeout(ctx, grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(lctx)
	if err != nil {
		return http.StatusServiceUnavailable, "sidecar: cannot look the token up: " + err.Error()
	}
	g, end, ok, err := s.grantDB.LookupGrant(lctx, id)
	release()
	switch {
	case err != nil:
		return http.StatusServiceUnavailable, fmt.Sprintf("sidecar: cannot look the token up in %s: %v", store.GrantsTable, err)
	case !ok || g.Job != job:
		return http.StatusNotFound, unknownTokenMsg
	case g.Owner != s.owner:
		return http.StatusConflict, fmt.Sprintf("token granted by another sidecar (%s): report it there", g.Owner)
	case end == store.GrantReported:
		return http.StatusConflict, "token already reported for this job"
	case end == store.GrantExpired || g.Expires <= 0:
		return http.StatusGone, s.expiredMsg()
	}
	if err := s.adopt(ctx, job); err != nil {
		return http.StatusServiceUnavailable, err.Error()
	}
	return 0, ""
}

// expiredMsg is the refusal of a report after its token's TTL.
func (s *Server) expiredMsg() string {
	return fmt.Sprintf("token expired: it went unreported past its TTL (%s) and was counted as a failed batch", s.book.ttl)
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
	throttled.JobPacer
	s   *Server
	job string
}

func (p grantPacer) Status() status.JobStatus {
	st := p.JobPacer.Status()
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

// heldGrants is the book's reason for job when its acquires went wanting
// for a slot or one of its tokens is older than staleGrant; "" otherwise,
// as tokens between acquire and report are a job's ordinary work.
func (s *Server) heldGrants(job string, now time.Time) string {
	s.gmu.Lock()
	starved := s.starved[job]
	s.gmu.Unlock()
	if !starved && !s.book.stale(job, now, staleGrant) {
		return ""
	}
	return s.book.reason(job, now)
}

// withGrants wraps a job's pacer so its status names unreported tokens.
func (s *Server) withGrants(job string, p throttled.JobPacer) throttled.JobPacer {
	if _, ok := p.(grantPacer); ok {
		return p
	}
	return grantPacer{JobPacer: p, s: s, job: job}
}
