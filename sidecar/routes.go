package sidecar

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/sidecar/api"
)

// Handler is the API's router.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range routes {
		mux.Handle(r.Pattern, s.withCORS(r.Pattern, s.guard(r.Route, func(w http.ResponseWriter, req *http.Request, tok config.Token) {
			r.handle(s, w, req, tok)
		})))
		if corsRoutes[r.Pattern] {
			method, path, _ := strings.Cut(r.Pattern, " ")
			mux.Handle("OPTIONS "+path, s.preflight(method))
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, pattern := mux.Handler(r); pattern == "" {
			// No route: ServeMux would answer 404 or 405 in plain text;
			// every refusal is the API's error.
			notRouted(w, r, h)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// notRouted answers a request no route serves with the status and Allow
// header ServeMux's handler h would give it, as api.Error.
func notRouted(w http.ResponseWriter, r *http.Request, h http.Handler) {
	probe := &statusOnly{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if allow := probe.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	switch probe.code {
	case http.StatusMethodNotAllowed:
		writeError(w, probe.code, fmt.Sprintf("%s is not served on %s; allowed: %s", r.Method, r.URL.Path, probe.header.Get("Allow")))
	case http.StatusNotFound, 0:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route serves %s", r.URL.Path))
	default: // a redirect to the cleaned path, or the like: ServeMux's own
		h.ServeHTTP(w, r)
	}
}

// statusOnly keeps a handler's status and headers and drops its body.
type statusOnly struct {
	header http.Header
	code   int
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}
func (s *statusOnly) Write(b []byte) (int, error) { s.WriteHeader(http.StatusOK); return len(b), nil }

// ScopeHook marks a route that authenticates itself: a webhook signature,
// or a bearer token with the pause scope.
const ScopeHook config.Scope = "hook"

// Route is one endpoint and the scope it needs ("" for none).
type Route struct {
	Name    string
	Pattern string
	Scope   config.Scope
}

// route is a Route with its handler and its wire types: the body it
// reads (nil for none) and the JSON it answers with on success (nil for
// none, or HTML, or the metrics' text). Every refusal answers api.Error.
type route struct {
	Route
	handle  func(*Server, http.ResponseWriter, *http.Request, config.Token)
	in, out reflect.Type
	// doc says what the route does, for docs/API.md.
	doc string
}

func typ[T any]() reflect.Type { return reflect.TypeFor[T]() }

// routes is the route table: every endpoint, the scope it requires, its
// handler and its wire types. Every method other than GET and HEAD needs
// pause or admin. docs/API.md is generated from it.
var routes = []route{
	{Route{"healthz", "GET /healthz", ""}, (*Server).healthz, nil, typ[api.Alive](), "liveness: the process serves"},
	{Route{"readyz", "GET /readyz", ""}, (*Server).readyz, nil, typ[api.Ready](), "readiness: 200 once /check can answer, 503 with the problems before"},
	{Route{"status", "GET /v1/status", config.ScopeRead}, (*Server).status, nil, typ[api.Status](), "whether this process leads; on the leader, its last decision and every signal"},
	{Route{"jobs", "GET /v1/jobs", config.ScopeRead}, (*Server).jobs, nil, typ[[]api.Job](), "every configured job's status"},
	{Route{"job", "GET /v1/jobs/{job}", config.ScopeRead}, (*Server).job, nil, typ[api.Job](), "one job's status; 404 for a job not configured"},
	{Route{"holds", "GET /v1/holds", config.ScopeRead}, (*Server).holds, nil, typ[[]api.Hold](), "the active holds"},
	{Route{"audit", "GET /v1/audit", config.ScopeRead}, (*Server).audit, nil, typ[[]api.AuditEntry](), "the audit log since ?since= (a duration, default 24h)"},
	{Route{"check", "GET /check/{job}", config.ScopeRead}, (*Server).admittedCheck, nil, typ[api.Check](), "freno's check, from memory: 200 go, with a token taken from the job's bucket (HEAD too), 429 throttled (no token now: demand the budget grows for), 417 paused, 404 unknown job, 500 stale or unavailable; Retry-After. Without a token (open_checks) the answer is [OpenCheck](#opencheck): the status and closed words, no reason"},
	{Route{"check", "HEAD /check/{job}", config.ScopeRead}, (*Server).admittedCheck, nil, nil, "the check's status code alone"},
	{Route{"check", "GET /check/{job}/{storeType}/{storeName}", config.ScopeRead}, (*Server).admittedCheck, nil, typ[api.Check](), "freno's path, as its clients ask it: the app is the job, the store is ignored; without a token, [OpenCheck](#opencheck)"},
	{Route{"check", "HEAD /check/{job}/{storeType}/{storeName}", config.ScopeRead}, (*Server).admittedCheck, nil, nil, "the same, the status code alone"},
	{Route{"pause", "POST /v1/holds", config.ScopePause}, (*Server).pause, typ[api.PauseRequest](), typ[api.Hold](), "pause: a hold made by the token (201); 503 with Retry-After when no primary can take it now (a failover), nothing placed: retry"},
	{Route{"resume", "DELETE /v1/holds/{id}", config.ScopePause}, (*Server).resume, nil, typ[api.Hold](), "release one hold (?reason= is audited); 404 when no such hold is active; 503 with Retry-After when no primary can take it now"},
	{Route{"resume-latched", "POST /v1/resume", config.ScopePause}, (*Server).resumeLatched, typ[api.ResumeRequest](), typ[api.ResumeAnswer](), "end a latched critical pause; 409 when none is latched"},
	{Route{"reload", "POST /v1/reload", config.ScopeAdmin}, (*Server).doReload, nil, typ[api.ReloadAnswer](), "reload the configuration file; 409 with the reason when refused"},
	{Route{"metrics", "GET /metrics", config.ScopeRead}, (*Server).metrics, nil, nil, "Prometheus metrics (text)"},
	{Route{"grafana", "POST /v1/hooks/grafana", ScopeHook}, (*Server).grafanaHook, nil, typ[api.HookResult](), "Grafana Alerting's webhook: a firing alert holds, its resolve releases (Grafana's own body)"},
	{Route{"ui-pause", "GET /ui/pause", ScopeUI}, (*Server).uiPauseGet, nil, nil, "the confirm page (HTML) for ?job="},
	{Route{"ui-pause", "GET /ui/resume", ScopeUI}, (*Server).uiPauseGet, nil, nil, "the confirm page (HTML), from a Resume link"},
	{Route{"ui-pause-post", "POST /ui/pause", ScopeUI}, (*Server).uiPausePost, nil, nil, "the confirm page's pause form (HTML)"},
	{Route{"ui-release", "POST /ui/release", ScopeUI}, (*Server).uiRelease, nil, nil, "the confirm page's release form (HTML)"},
	{Route{"acquire", "POST /v1/jobs/{job}/acquire", config.ScopeWork}, (*Server).acquire, typ[api.AcquireRequest](), typ[api.AcquireResponse](), "tokens for a remote worker, each holding an in-flight slot until reported; none within max_wait is 429 with api.Throttled and Retry-After; 503 with Retry-After when no token can be recorded in throttled.grants now, or while another live sidecar holds this one's listen id"},
	{Route{"report", "POST /v1/jobs/{job}/report", config.ScopeWork}, (*Server).report, typ[api.ReportRequest](), typ[api.ReportAnswer](), "one batch's outcome for its token, also after a restart of the sidecar that granted it; 200 only once the token's end is stored in throttled.grants, else 503 with Retry-After and nothing counted (retry: the batch is counted once); 409 when reported already or granted by another sidecar; 410 once the token expired (its batch was counted failed at its TTL), however late, for an hour past its expiry (throttled.grants keeps it that long); 404 only for a token never granted for the job, or expired more than that hour ago"},
}

// Routes lists every endpoint with the scope it requires.
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, r := range routes {
		out[i] = r.Route
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, api.Error{Error: msg})
}
