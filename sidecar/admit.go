package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/status"
)

// Admission. A request is authenticated from its headers first, before it
// takes any shared capacity or has its body read; only then does it take a
// slot of its class's own budget. A crowd of anonymous or slow clients can
// fill the budget of the class it reaches (at most the webhook's or the
// anonymous one), never the check's or a person's. Reports have a budget of
// their own: an acquire holds its slot while it waits for a token (up to
// max_wait), and a report is what frees the job's in-flight slots, so
// acquires queued behind a token must never shed the reports that would
// give them one.
//
//	class    routes                                   budget
//	free     /healthz, /readyz                         none: answered from memory, no body read
//	check    /check/{job}                              MaxConcurrent
//	person   pause, resume, reload, the confirm page   personSlots
//	read     status, jobs, holds, audit, metrics       MaxConcurrent
//	work     acquire                                   MaxConcurrent
//	report   report                                    MaxConcurrent
//	hook     the Grafana webhook                       hookSlots, body read within hookReadTimeout
//	anon     reads without a token under open_reads    anonSlots
type class int

const (
	classFree class = iota
	classCheck
	classPerson
	classRead
	classWork
	classReport
	classHook
	classAnon
	numClasses
)

var classNames = [numClasses]string{"free", "check", "person", "read", "work", "report", "hook", "anon"}

func (c class) String() string { return classNames[c] }

const (
	// personSlots is the budget of a person's requests (pause, resume, the
	// confirm page, reload): they are few and must always get through.
	personSlots = 16
	// hookSlots bounds webhook requests in flight, while they are read and
	// verified: a signature can be checked only once the body is in.
	hookSlots = 4
	// anonSlots bounds reads without a token (open_reads).
	anonSlots = 16
	// hookReadTimeout bounds reading a webhook's body; Grafana sends a few
	// KiB at once.
	hookReadTimeout = 3 * time.Second
	// bodyReadTimeout bounds reading an authenticated request's body.
	bodyReadTimeout = 5 * time.Second
	// handlerTimeout bounds a request's work once admitted.
	handlerTimeout = 10 * time.Second
)

// routeClass is the budget a route's requests take once authenticated.
func routeClass(r Route) class {
	switch {
	case r.Name == "healthz" || r.Name == "readyz":
		return classFree
	case r.Name == "check":
		return classCheck
	case r.Name == "report":
		return classReport
	case r.Scope == config.ScopeWork:
		return classWork
	case r.Scope == ScopeHook:
		return classHook
	case r.Scope == ScopeUI, r.Scope == config.ScopePause, r.Scope == config.ScopeAdmin:
		return classPerson
	default:
		return classRead
	}
}

// newBudgets makes each class's slots for a limit of maxConcurrent.
func newBudgets(maxConcurrent int) [numClasses]chan struct{} {
	var b [numClasses]chan struct{}
	for c, n := range [numClasses]int{0, maxConcurrent, personSlots, maxConcurrent, maxConcurrent, maxConcurrent, hookSlots, anonSlots} {
		if n > 0 {
			b[c] = make(chan struct{}, n)
		}
	}
	return b
}

// guard admits a request to route r: it authenticates from the headers,
// refuses an oversized body, reads the body within a deadline (a webhook's
// inside its own small budget), takes a slot of the class's budget or
// sheds with 503, bounds the handler's time, then calls h.
func (s *Server) guard(r Route, h func(http.ResponseWriter, *http.Request, config.Token)) http.Handler {
	cls := routeClass(r)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cfg := s.config()
		// Until its body is in, a refusal closes the connection: net/http
		// would otherwise read the rest of the body before answering, and
		// after a body deadline with no deadline at all, so one client
		// trickling a byte a second would keep a connection and a
		// goroutine for hours.
		if req.ContentLength != 0 {
			w.Header().Set("Connection", "close")
		}
		tok, cls, ok := s.authenticate(w, req, r, cls, cfg)
		if !ok {
			return
		}
		if req.ContentLength > maxBody {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes: at most %d", req.ContentLength, maxBody))
			return
		}
		// A webhook is read inside its slot: until its signature is checked
		// it is anonymous. Anyone else has shown who they are already, and
		// reads the body before taking capacity, so a slow body holds none.
		if cls == classHook {
			if !s.take(w, cls) {
				return
			}
			defer s.release(cls)
		}
		if !s.readBody(w, req, cls) {
			return
		}
		w.Header().Del("Connection")
		if cls != classHook {
			if !s.take(w, cls) {
				return
			}
			defer s.release(cls)
		}
		ctx, cancel := context.WithTimeout(req.Context(), handlerTimeout)
		defer cancel()
		if cls == classAnon {
			ctx = context.WithValue(ctx, anonymousKey{}, true)
		}
		h(w, req.WithContext(ctx), tok)
	})
}

// authenticate checks what the request's headers can show: a bearer token
// with the route's scope, or for the webhook and the confirm page that
// they name someone they could be. It answers 401 or 403 itself, and
// returns the class the request is admitted to (anonymous reads go to
// their own).
func (s *Server) authenticate(w http.ResponseWriter, req *http.Request, r Route, cls class, cfg *config.Config) (config.Token, class, bool) {
	switch r.Scope {
	case "":
		return config.Token{}, cls, true
	case ScopeHook:
		if err := s.preauthGrafana(req, cfg); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="throttled"`)
			writeError(w, http.StatusUnauthorized, err.Error())
			return config.Token{}, cls, false
		}
		return config.Token{}, cls, true
	case ScopeUI:
		// The confirm page answers a stranger with its own 401 page; it
		// needs no capacity for that and reads no body.
		if _, ok := s.uiUser(req); !ok {
			s.uiAuth(w, req)
			return config.Token{}, cls, false
		}
		return config.Token{}, cls, true
	}
	secret, hasToken := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if r.Scope == config.ScopeRead && (cfg.OpenReads || cfg.OpenChecks && r.Name == "check") && (!hasToken || secret == "") {
		return config.Token{}, classAnon, true
	}
	if !hasToken || secret == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="throttled"`)
		writeError(w, http.StatusUnauthorized, "a bearer token is required")
		return config.Token{}, cls, false
	}
	t, found := cfg.Token(secret)
	if !found {
		writeError(w, http.StatusUnauthorized, "unknown token")
		return config.Token{}, cls, false
	}
	if !t.Allows(r.Scope) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("token %q lacks scope %q", t.Name, r.Scope))
		return config.Token{}, cls, false
	}
	return t, cls, true
}

// anonymousKey marks a request's context when it was admitted without a
// token (open_checks, open_reads): its handler answers less.
type anonymousKey struct{}

// anonymous reports whether r was admitted without a token.
func anonymous(r *http.Request) bool {
	a, _ := r.Context().Value(anonymousKey{}).(bool)
	return a
}

// take claims a slot of cls's budget, or answers 503 with Retry-After.
func (s *Server) take(w http.ResponseWriter, cls class) bool {
	sem := s.budgets[cls]
	if sem == nil {
		return true
	}
	select {
	case sem <- struct{}{}:
		return true
	default:
		s.shedBy[cls].Add(1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "too many requests in flight; retry after 1 s")
		return false
	}
}

func (s *Server) release(cls class) {
	if sem := s.budgets[cls]; sem != nil {
		<-sem
	}
}

// readBody reads a request's whole body, at most maxBody, within the
// class's read deadline, and puts it back as a buffer: a handler never
// waits on the client. GET and HEAD bodies are not read.
func (s *Server) readBody(w http.ResponseWriter, req *http.Request, cls class) bool {
	if req.Method == http.MethodGet || req.Method == http.MethodHead || req.Body == nil || req.Body == http.NoBody {
		return true
	}
	timeout := bodyReadTimeout
	if cls == classHook {
		timeout = hookReadTimeout
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout)) // not every writer can (tests' recorders); the server's ReadTimeout still bounds it
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	_ = rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: at most %d bytes", maxBody))
		return false
	case err != nil:
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("body not received within %s", timeout))
		return false
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

// admittedCheck is /check for whoever was admitted: a caller with a read
// token gets the full answer (check, api.Check), one admitted without a
// token (open_checks, open_reads) gets openCheck's. An open check is for
// gh-ost and freno's clients, which read the status code; it must not
// hand a stranger what /v1/holds would refuse them: a hold's ID, who made
// it and why, or a failing signal's file, address and error.
func (s *Server) admittedCheck(w http.ResponseWriter, r *http.Request, tok config.Token) {
	if anonymous(r) {
		s.openCheck(w, r)
		return
	}
	s.check(w, r, tok)
}

// openCheck answers a check without a token: the status code check
// would give, Retry-After, and api.OpenCheck's closed words, all from one
// reading of the job's state.
func (s *Server) openCheck(w http.ResponseWriter, r *http.Request) {
	job := r.PathValue("job")
	js, a := s.checkJob(job)
	out := api.OpenCheck{Job: job, State: a.state, Code: "unknown_job", StatusCode: a.code, Message: a.state}
	if a.code != http.StatusNotFound {
		out.Code = string(js.status.Code)
		if out.Code == "" {
			out.Code = string(status.CodeOf(js.status.State))
		}
	}
	if out.StatusCode != http.StatusOK {
		w.Header().Set("Retry-After", "1")
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(out.StatusCode)
		return
	}
	writeJSON(w, out.StatusCode, out)
}
