// Package sidecar is the HTTP API of `throttled run`: status, jobs, holds
// and the audit log to read; pause and resume and reload to act, each
// behind a bearer token with the right scope; and a freno-compatible check
// that answers from memory, never waiting on the database.
package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// maxBody bounds every request body.
const maxBody = 64 << 10

// Server serves the API. Create it with New; its handler is safe for
// concurrent use.
type Server struct {
	client *throttled.Client
	store  *holds.Store
	log    hclog.Logger
	reload func(ctx context.Context) (*config.Config, error)
	// budgets are each admission class's slots (admit.go).
	budgets [numClasses]chan struct{}
	shedBy  [numClasses]atomic.Int64
	// csrfKey signs the confirm page's forms; it lives as long as the
	// process, so a restart invalidates forms already served.
	csrfKey []byte

	mu     sync.RWMutex
	cfg    *config.Config
	pacers map[string]throttled.Pacer

	gmu    sync.Mutex
	grants map[string]*grant // tokens handed to remote workers, until reported

	reloadsApplied, reloadsRefused, violations atomic.Int64
	pages                                      PageCounter
	annotations                                *Annotations
	wait                                       *prometheus.HistogramVec
	reports                                    map[string]*reportTotals // by job, under gmu
}

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

// New returns a Server for client under cfg. reload loads, validates and
// applies a new configuration, or returns why it was refused.
func New(client *throttled.Client, cfg *config.Config, reload func(context.Context) (*config.Config, error), log hclog.Logger) (*Server, error) {
	if client.Store() == nil {
		return nil, errors.New("sidecar: the client needs a CoordinationDSN")
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Server{client: client, store: client.Store(), log: log, reload: reload, budgets: newBudgets(cfg.MaxConcurrent), csrfKey: make([]byte, 32),
		pacers: map[string]throttled.Pacer{}, grants: map[string]*grant{}, wait: newWaitHistogram(), reports: map[string]*reportTotals{}}
	if _, err := rand.Read(s.csrfKey); err != nil {
		return nil, fmt.Errorf("sidecar: CSRF key: %w", err)
	}
	if err := s.Apply(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Apply makes cfg current: its tokens, and a worker for every configured
// job. New jobs are registered, changed ones updated, removed ones
// stopped; the database work happens outside the lock the check path
// reads under, and a failure undoes the jobs this call added.
func (s *Server) Apply(cfg *config.Config) error {
	s.mu.RLock()
	have := maps.Clone(s.pacers)
	was := map[string]jobs.Config{}
	if s.cfg != nil {
		for _, j := range s.cfg.Jobs {
			was[j.Name] = jobConfig(j)
		}
	}
	s.mu.RUnlock()
	next := map[string]throttled.Pacer{}
	var added, updated []string
	// A refused configuration changes nothing: the jobs it added go, the
	// ones it changed get their limits back.
	undo := func() {
		for _, name := range added {
			_ = s.client.RemoveJob(name)
		}
		for _, name := range updated {
			if err := s.client.UpdateJob(was[name]); err != nil {
				s.log.Error("cannot restore a job's limits after a refused configuration", "job", name, "error", err)
			}
		}
	}
	for _, j := range cfg.Jobs {
		jc := jobConfig(j)
		if p, ok := have[j.Name]; ok {
			updated = append(updated, j.Name) // restored on undo even if this update fails half-way
			if err := s.client.UpdateJob(jc); err != nil {
				undo()
				return err
			}
			next[j.Name] = p
			continue
		}
		p, err := s.client.Pacer(jc)
		if err != nil {
			undo()
			return err
		}
		added = append(added, j.Name)
		next[j.Name] = p
	}
	s.mu.Lock()
	old := s.pacers
	s.pacers, s.cfg = next, cfg
	s.mu.Unlock()
	for name := range old {
		if _, kept := next[name]; !kept {
			if err := s.client.RemoveJob(name); err != nil {
				s.log.Warn("cannot remove a job dropped from the configuration", "job", name, "error", err)
			}
		}
	}
	return nil
}

// jobConfig is a configured job's pacing, as the client registers it.
func jobConfig(j config.Job) jobs.Config {
	return jobs.Config{Name: j.Name, Weight: j.Weight, MinRate: j.MinRate, MaxRate: j.MaxRate}
}

func (s *Server) config() *config.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg
}

// Handler is the API's router.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range Routes() {
		mux.Handle(r.Pattern, s.withCORS(r.Pattern, s.guard(r, s.handlerFor(r.Name))))
		if corsRoutes[r.Pattern] {
			method, path, _ := strings.Cut(r.Pattern, " ")
			mux.Handle("OPTIONS "+path, s.preflight(method))
		}
	}
	return mux
}

// ScopeHook marks a route that authenticates itself: a webhook signature,
// or a bearer token with the pause scope.
const ScopeHook config.Scope = "hook"

// Route is one endpoint and the scope it needs ("" for none).
type Route struct {
	Name    string
	Pattern string
	Scope   config.Scope
}

// Routes lists every endpoint with the scope it requires. Every method
// other than GET and HEAD needs pause or admin.
func Routes() []Route {
	return []Route{
		{"healthz", "GET /healthz", ""},
		{"readyz", "GET /readyz", ""},
		{"status", "GET /v1/status", config.ScopeRead},
		{"jobs", "GET /v1/jobs", config.ScopeRead},
		{"job", "GET /v1/jobs/{job}", config.ScopeRead},
		{"holds", "GET /v1/holds", config.ScopeRead},
		{"audit", "GET /v1/audit", config.ScopeRead},
		{"check", "GET /check/{job}", config.ScopeRead},
		{"check", "HEAD /check/{job}", config.ScopeRead},
		{"pause", "POST /v1/holds", config.ScopePause},
		{"resume", "DELETE /v1/holds/{id}", config.ScopePause},
		{"resume-latched", "POST /v1/resume", config.ScopePause},
		{"reload", "POST /v1/reload", config.ScopeAdmin},
		{"metrics", "GET /metrics", config.ScopeRead},
		{"grafana", "POST /v1/hooks/grafana", ScopeHook},
		{"ui-pause", "GET /ui/pause", ScopeUI},
		{"ui-pause", "GET /ui/resume", ScopeUI},
		{"ui-pause-post", "POST /ui/pause", ScopeUI},
		{"ui-release", "POST /ui/release", ScopeUI},
		{"acquire", "POST /v1/jobs/{job}/acquire", config.ScopeWork},
		{"report", "POST /v1/jobs/{job}/report", config.ScopeWork},
	}
}

func (s *Server) handlerFor(name string) func(http.ResponseWriter, *http.Request, config.Token) {
	return map[string]func(http.ResponseWriter, *http.Request, config.Token){
		"healthz": s.healthz, "readyz": s.readyz, "status": s.status, "jobs": s.jobs, "job": s.job,
		"holds": s.holds, "audit": s.audit, "check": s.check, "pause": s.pause, "resume": s.resume, "resume-latched": s.resumeLatched, "reload": s.doReload,
		"acquire": s.acquire, "report": s.report, "metrics": s.metricsHandler(), "grafana": s.grafanaHook,
		"ui-pause": s.uiPauseGet, "ui-pause-post": s.uiPausePost, "ui-release": s.uiRelease,
	}[name]
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}

// readyz: configuration loaded, holds confirmed (database reachable), for
// the leader fresh samples of the primary, and every configured job holding
// a valid allocation, so a check after a 200 here never answers 500 for
// want of one.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	var problems []string
	if hs := s.client.Watcher().Applying(time.Now(), ""); len(hs) > 0 && hs[0].ID == holds.UnconfirmedHoldID {
		problems = append(problems, hs[0].Reason)
	}
	if s.client.Leader() {
		snap := s.client.Snapshot()
		if l, ok := snap.Get(signals.PrimaryLoad, nil); !ok || l.Err != nil || snap.Stale(l) {
			problems = append(problems, "no fresh sample of the primary")
		}
	}
	// Ready means /check can answer: a job still waiting for its first
	// allocation (or whose lease lapsed) would get 500 there.
	for _, j := range s.config().Jobs {
		if js, ok := s.jobState(j.Name); ok && js.Unavailable {
			problems = append(problems, fmt.Sprintf("job %s has no valid allocation: %s", j.Name, js.Reason))
		}
	}
	if len(problems) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "problems": problems})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true, "config_version": s.config().Version})
}

type signalJSON struct {
	Name       signals.Name      `json:"name"`
	Labels     map[string]string `json:"labels,omitempty"`
	Value      *float64          `json:"value"`
	AgeSeconds float64           `json:"age_seconds"`
	Stale      bool              `json:"stale"`
	Error      string            `json:"error,omitempty"`
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	d := s.client.Decision()
	out := map[string]any{"leader": s.client.Leader(), "config_version": s.config().Version}
	if s.client.Leader() {
		out["mode"], out["budget"], out["binding"], out["reason"], out["decided_at"] = d.Mode, d.Budget, d.Binding, d.Reason, d.At
		out["signals"] = signalsJSON(s.client.Snapshot())
	}
	writeJSON(w, http.StatusOK, out)
}

// signalsJSON renders every sample of snap with its age and staleness.
func signalsJSON(snap signals.Snapshot) []signalJSON {
	sigs := []signalJSON{}
	for _, x := range snap.Samples {
		j := signalJSON{Name: x.Name, Labels: x.Labels, AgeSeconds: x.Age(snap.At).Seconds(), Stale: snap.Stale(x)}
		if x.Err != nil {
			j.Error = x.Err.Error()
		} else {
			v := x.Value
			j.Value = &v
		}
		sigs = append(sigs, j)
	}
	return sigs
}

type jobJSON struct {
	Job     string  `json:"job"`
	State   string  `json:"state"`
	Reason  string  `json:"reason"`
	Binding string  `json:"binding"`
	Rate    float64 `json:"rate"`
	// Unavailable: paused for want of a valid allocation (lease lapsed,
	// database unreachable, holds unconfirmed), not by a hold or decision.
	Unavailable bool `json:"unavailable"`
}

func (s *Server) jobState(name string) (jobJSON, bool) {
	s.mu.RLock()
	p, ok := s.pacers[name]
	s.mu.RUnlock()
	if !ok {
		return jobJSON{}, false
	}
	state, reason, binding, rate := p.Explain()
	js := jobJSON{Job: name, State: state, Reason: reason, Binding: binding, Rate: rate}
	if u, ok := p.(interface{ Unavailable() bool }); ok {
		js.Unavailable = u.Unavailable()
	}
	return js, true
}

func (s *Server) jobs(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	list := []jobJSON{}
	for _, j := range s.config().Jobs {
		if js, ok := s.jobState(j.Name); ok {
			list = append(list, js)
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) job(w http.ResponseWriter, r *http.Request, _ config.Token) {
	js, ok := s.jobState(r.PathValue("job"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no job %q is configured", r.PathValue("job")))
		return
	}
	writeJSON(w, http.StatusOK, js)
}

// check answers as freno does, from memory: 200 go, 429 throttled, 417
// held or paused, 404 unknown job, 500 when the state is stale or the
// database unreachable. It never waits on the database.
func (s *Server) check(w http.ResponseWriter, r *http.Request, _ config.Token) {
	js, ok := s.jobState(r.PathValue("job"))
	code, msg := http.StatusOK, "go"
	switch {
	case !ok:
		code, msg = http.StatusNotFound, "unknown job"
	case js.Unavailable, js.State == string(throttle.JobPaused) && strings.HasPrefix(js.Reason, "stale:"):
		code, msg = http.StatusInternalServerError, js.Reason
	case js.State == string(throttle.JobPaused):
		code, msg = http.StatusExpectationFailed, js.Reason
	case js.State == string(throttle.JobThrottled) && strings.Contains(js.Reason, "cut"),
		js.Rate <= 0:
		code, msg = http.StatusTooManyRequests, js.Reason
	}
	if code != http.StatusOK {
		w.Header().Set("Retry-After", "1")
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(code)
		return
	}
	writeJSON(w, code, checkJSON{Job: r.PathValue("job"), Message: msg, Rate: js.Rate, Status: code})
}

// checkJSON is /check's body; its keys are in the order a map of them
// would be written, as freno clients have always read them.
type checkJSON struct {
	Job     string  `json:"job"`
	Message string  `json:"message"`
	Rate    float64 `json:"rate"`
	Status  int     `json:"status"`
}

func (s *Server) holds(w http.ResponseWriter, r *http.Request, _ config.Token) {
	active, err := s.store.Active(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	list := []map[string]any{}
	for _, h := range active {
		list = append(list, holdJSON(h))
	}
	writeJSON(w, http.StatusOK, list)
}

func holdJSON(h throttle.Hold) map[string]any {
	return map[string]any{"id": h.ID, "scope": h.Scope.String(), "source": h.Source, "reason": h.Reason, "actor": h.Actor,
		"created": h.Created.UTC(), "expires": h.Expires.UTC()}
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request, _ config.Token) {
	since := 24 * time.Hour
	if v := r.URL.Query().Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since=%q: want a positive duration such as 1h", v))
			return
		}
		since = d
	}
	es, err := s.store.AuditSince(r.Context(), time.Now().Add(-since))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if es == nil {
		es = []holds.Entry{}
	}
	writeJSON(w, http.StatusOK, es)
}

// PauseRequest is the body of POST /v1/holds.
type PauseRequest struct {
	// Scope is "all", "job:NAME" or "group:PREFIX".
	Scope string `json:"scope"`
	// TTL is a duration such as "30m"; empty means the default.
	TTL    string `json:"ttl"`
	Reason string `json:"reason"`
}

// parse reads the scope and TTL (0 for the default).
func (req PauseRequest) parse() (throttle.Scope, time.Duration, error) {
	sc, err := ParseScope(req.Scope)
	if err != nil {
		return throttle.Scope{}, 0, err
	}
	var ttl time.Duration
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil {
			return throttle.Scope{}, 0, fmt.Errorf("ttl %q: want a duration such as 30m", req.TTL)
		}
	}
	return sc, ttl, nil
}

// ParseScope reads "all", "job:NAME" or "group:PREFIX".
func ParseScope(s string) (throttle.Scope, error) {
	kind, value, hasValue := strings.Cut(s, ":")
	var sc throttle.Scope
	switch kind {
	case "all":
		if hasValue {
			return sc, fmt.Errorf("scope %q: all takes no name", s)
		}
		sc = throttle.AllJobs()
	case "job":
		sc = throttle.OneJob(throttle.Job(value))
	case "group":
		sc = throttle.Group(value)
	default:
		return sc, fmt.Errorf("scope %q: want all, job:NAME or group:PREFIX", s)
	}
	return sc, sc.Validate()
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, tok config.Token) {
	var req PauseRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	sc, ttl, err := req.parse()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	h, err := s.store.Add(r.Context(), holds.Request{Scope: sc, Source: throttle.SourceManual, Reason: req.Reason, Actor: "token:" + tok.Name, TTL: ttl})
	if errors.Is(err, holds.ErrInvalid) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, holdJSON(h))
}

// ResumeRequest ends a latched critical pause.
type ResumeRequest struct {
	Reason string `json:"reason"`
}

// resumeLatched asks the leader to end the cluster's latched critical
// pause, as the token; 409 when there is none.
func (s *Server) resumeLatched(w http.ResponseWriter, r *http.Request, tok config.Token) {
	var req ResumeRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := holds.Storable(req.Reason); err != nil {
		writeError(w, http.StatusBadRequest, "reason: "+err.Error())
		return
	}
	switch err := s.client.ResumeLatched(r.Context(), "token:"+tok.Name, req.Reason); {
	case errors.Is(err, throttled.ErrNotLatched):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]any{"resume": "requested",
			"note": "the leader ends the latch on its next decision; jobs restart once the signals are calm, slowly"})
	}
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, tok config.Token) {
	h, err := s.store.Release(r.Context(), r.PathValue("id"), "token:"+tok.Name, throttle.SourceManual, r.URL.Query().Get("reason"))
	switch {
	case errors.Is(err, holds.ErrUnknownHold):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, holds.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, holdJSON(h))
	}
}

func (s *Server) doReload(w http.ResponseWriter, r *http.Request, tok config.Token) {
	cfg, err := s.reload(r.Context())
	if err != nil {
		writeJSON(w, http.StatusConflict, map[string]any{"applied": false, "error": err.Error(), "config_version": s.config().Version})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"applied": true, "config_version": cfg.Version, "by": tok.Name})
}

// RetryAfter parses a Retry-After header in seconds, for clients.
func RetryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// AcquireRequest is the body of POST /v1/jobs/{job}/acquire.
type AcquireRequest struct {
	// N is how many tokens to take, 1 to 100. Defaults to 1.
	N int `json:"n"`
	// MaxWait bounds the wait for them, such as "2s"; at most 10s.
	// Defaults to 1s.
	MaxWait string `json:"max_wait"`
}

// parse checks the request, settles N (1 when absent) and returns how
// long to wait for the tokens.
func (req *AcquireRequest) parse() (time.Duration, error) {
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

// check refuses negative, non-finite or impossible numbers.
func (req ReportRequest) check() error {
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

// AcquireResponse lists the tokens granted; report each one.
type AcquireResponse struct {
	Tokens []string `json:"tokens"`
	Rate   float64  `json:"rate"`
}

// ReportRequest is the body of POST /v1/jobs/{job}/report.
type ReportRequest struct {
	Token      string  `json:"token"`
	Rows       int64   `json:"rows"`
	DurationMs float64 `json:"duration_ms"`
	// Error is the batch's error, empty on success.
	Error string `json:"error"`
	// BatchSize and Retry are optional: the batch's size, and whether it
	// was a retry, for the metrics.
	BatchSize int  `json:"batch_size,omitempty"`
	Retry     bool `json:"retry,omitempty"`
	// Remaining is optional: the rows the job still has to do after this
	// batch, for the ETA on the jobs dashboard.
	Remaining *int64 `json:"remaining,omitempty"`
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
	var req AcquireRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	wait, err := req.parse()
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
	resp := AcquireResponse{Tokens: []string{}}
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
	resp.Rate = rate
	if len(resp.Tokens) == 0 {
		retry := 1
		if rate > 0 {
			retry = max(1, int(math.Ceil(1/rate)))
		}
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "no token within max_wait", "reason": reason, "rate": rate})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) report(w http.ResponseWriter, r *http.Request, _ config.Token) {
	var req ReportRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := req.check(); err != nil {
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
	writeJSON(w, http.StatusOK, map[string]any{"reported": true})
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
