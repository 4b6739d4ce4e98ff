package sidecar

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/throttled/throttled/config"
)

// CORS for Grafana's visualization actions: a browser showing a Grafana
// dashboard may call POST /v1/holds (the Pause action) cross-origin, and
// only from a Grafana origin named in grafana.return_urls. The request
// still needs its bearer token with the pause scope; no cookie or other
// credential is ever honoured (no Access-Control-Allow-Credentials).
// Every other endpoint answers no cross-origin request.

// corsOrigin returns origin if the configuration allows it: the scheme
// and host of one of grafana.return_urls.
func corsOrigin(cfg *config.Config, origin string) (string, bool) {
	if origin == "" {
		return "", false
	}
	o, err := url.Parse(origin)
	if err != nil || (o.Scheme != "http" && o.Scheme != "https") || o.Host == "" || (o.Path != "" && o.Path != "/") {
		return "", false
	}
	for _, allowed := range cfg.Grafana.ReturnURLs {
		a, err := url.Parse(allowed)
		if err == nil && a.Scheme == o.Scheme && strings.EqualFold(a.Host, o.Host) {
			return o.Scheme + "://" + o.Host, true
		}
	}
	return "", false
}

// corsRoutes are the patterns a Grafana action may call.
var corsRoutes = map[string]bool{"POST /v1/holds": true}

// withCORS answers the preflight of corsRoutes and marks their answers
// readable by an allowed Grafana origin.
func (s *Server) withCORS(pattern string, h http.Handler) http.Handler {
	if !corsRoutes[pattern] {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Origin")
		if o, ok := corsOrigin(s.config(), r.Header.Get("Origin")); ok {
			w.Header().Set("Access-Control-Allow-Origin", o)
		}
		h.ServeHTTP(w, r)
	})
}

// preflight answers OPTIONS for a CORS route: 204 with the method and
// headers allowed for an allowed origin, 403 for any other.
func (s *Server) preflight(method string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Origin")
		o, ok := corsOrigin(s.config(), r.Header.Get("Origin"))
		if !ok || r.Header.Get("Access-Control-Request-Method") != method {
			writeError(w, http.StatusForbidden, "cross-origin requests come only from a Grafana origin in grafana.return_urls, for "+method)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", o)
		h.Set("Access-Control-Allow-Methods", method)
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	})
}
