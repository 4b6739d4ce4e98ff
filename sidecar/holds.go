package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

func (s *Server) holds(w http.ResponseWriter, r *http.Request, _ config.Token) {
	active, err := s.db.Holds().Active(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	list := []api.Hold{}
	for _, h := range active {
		list = append(list, HoldJSON(h))
	}
	writeJSON(w, http.StatusOK, list)
}

// HoldJSON shows a hold as the API does.
func HoldJSON(h hold.Hold) api.Hold {
	return api.Hold{ID: h.ID, Scope: h.Scope.String(), Source: string(h.Source), Reason: h.Reason, Actor: h.Actor,
		Created: h.Created.UTC(), Expires: h.Expires.UTC(), Ratio: h.Ratio, Exempt: h.Exempt}
}

// HoldFromJSON reads a hold as the API shows it; a scope it cannot parse
// is an error.
func HoldFromJSON(h api.Hold) (hold.Hold, error) {
	sc, err := hold.ParseScope(h.Scope)
	if err != nil {
		return hold.Hold{}, err
	}
	return hold.Hold{ID: h.ID, Scope: sc, Source: hold.Source(h.Source), Reason: h.Reason, Actor: h.Actor, Created: h.Created, Expires: h.Expires, Ratio: h.Ratio, Exempt: h.Exempt}, nil
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
	es, err := s.db.Audit().Since(r.Context(), time.Now().Add(-since))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := make([]api.AuditEntry, 0, len(es))
	for _, e := range es {
		a := api.AuditEntry{ID: e.ID, At: e.At, Event: e.Event, Actor: e.Actor, Source: e.Source, Reason: e.Reason, HoldID: e.HoldID}
		if len(e.Detail) > 0 {
			a.Detail, _ = json.Marshal(e.Detail) // it came from jsonb
		}
		out = append(out, a)
	}
	writeJSON(w, http.StatusOK, out)
}

// parsePause reads a pause request's scope and TTL (0 for the default).
func parsePause(req api.PauseRequest) (hold.Scope, time.Duration, error) {
	sc, err := hold.ParseScope(req.Scope)
	if err != nil {
		return hold.Scope{}, 0, err
	}
	var ttl time.Duration
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil {
			return hold.Scope{}, 0, fmt.Errorf("ttl %q: want a duration such as 30m", req.TTL)
		}
	}
	return sc, ttl, nil
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, tok config.Token) {
	var req api.PauseRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	sc, ttl, err := parsePause(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	hreq := hold.Request{Scope: sc, Source: hold.SourceManual, Reason: req.Reason, Actor: "token:" + tok.Name, TTL: ttl, Ratio: req.Ratio, Exempt: req.Exempt}
	// Refused before anything is written: what the store refuses, then
	// an exemption from a signal neither throttled, this sidecar's file
	// nor the cluster's workers know, which would do nothing.
	cfg := s.config()
	err = s.db.Holds().Check(hreq)
	if err == nil {
		err = s.db.Registry().CheckExempt(r.Context(), req.Exempt, customSignals(cfg))
	}
	var h hold.Hold
	if err == nil {
		h, err = s.db.Holds().Add(r.Context(), hreq)
	}
	if errors.Is(err, hold.ErrInvalid) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		writeStoreError(w, "hold not placed", err)
		return
	}
	answer := HoldJSON(h)
	// A hold on a job no process knows is placed (the job may start
	// later), with a warning: it may be a typo that holds nothing.
	warnings, err := s.db.Registry().ScopeWarnings(r.Context(), sc, configuredJobs(cfg))
	if err != nil {
		warnings = []string{"could not check that a process has registered the hold's jobs: " + err.Error()}
	}
	answer.Warnings = warnings
	writeJSON(w, http.StatusCreated, answer)
}

// writeStoreError answers a store's failure: 503 with Retry-After when
// the cluster cannot take the request for now (a failover's window: no
// primary answers; the error names each host's), so automation retries;
// 500 otherwise. what says what was not done.
func writeStoreError(w http.ResponseWriter, what string, err error) {
	if holds.Unavailable(err) {
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusServiceUnavailable, what+": the database cannot take it now (a failover?); retry: "+err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, what+": "+err.Error())
}

// customSignals are the names of cfg's custom signals.
func customSignals(cfg *config.Config) []string {
	var out []string
	for _, c := range cfg.Custom {
		out = append(out, string(c.Name))
	}
	return out
}

// configuredJobs are the names of cfg's jobs.
func configuredJobs(cfg *config.Config) []string {
	var out []string
	for _, j := range cfg.Jobs {
		out = append(out, j.Name)
	}
	return out
}

// resumeLatched asks the leader to end the cluster's latched critical
// pause, as the token; 409 when there is none.
func (s *Server) resumeLatched(w http.ResponseWriter, r *http.Request, tok config.Token) {
	var req api.ResumeRequest
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := hold.Storable(req.Reason); err != nil {
		writeError(w, http.StatusBadRequest, "reason: "+err.Error())
		return
	}
	switch err := s.client.ResumeLatched(r.Context(), "token:"+tok.Name, req.Reason); {
	case errors.Is(err, throttled.ErrNotLatched):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, api.ResumeAnswer{Resume: "requested",
			Note: "the leader ends the latch on its next decision; jobs restart once the signals are calm, slowly"})
	}
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, tok config.Token) {
	h, err := s.db.Holds().Release(r.Context(), r.PathValue("id"), "token:"+tok.Name, hold.SourceManual, r.URL.Query().Get("reason"))
	switch {
	case errors.Is(err, hold.ErrUnknown):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, hold.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case err != nil:
		writeStoreError(w, "hold not released", err)
	default:
		writeJSON(w, http.StatusOK, HoldJSON(h))
	}
}
