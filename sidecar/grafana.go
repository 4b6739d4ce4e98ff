package sidecar

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/throttle"
)

// GrafanaPayload is the part of Grafana Alerting's webhook notification
// the hook reads.
type GrafanaPayload struct {
	Receiver string         `json:"receiver"`
	Status   string         `json:"status"`
	Alerts   []GrafanaAlert `json:"alerts"`
}

// GrafanaAlert is one alert of a notification.
type GrafanaAlert struct {
	Status      string            `json:"status"` // firing or resolved
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Fingerprint string            `json:"fingerprint"`
}

// GrafanaSignature is the signature Grafana sends: hex HMAC-SHA256 under
// secret of the body, or of timestamp + ":" + body when a timestamp is
// sent.
func GrafanaSignature(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	if timestamp != "" {
		m.Write([]byte(timestamp + ":"))
	}
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// authGrafana accepts a valid signature (with a fresh timestamp, when one
// is sent) or a bearer token with the pause scope.
func (s *Server) authGrafana(r *http.Request, body []byte) (string, error) {
	cfg := s.config()
	g := cfg.Grafana
	if sig := r.Header.Get(g.SignatureHeader); sig != "" && g.WebhookSecret != "" {
		ts := r.Header.Get(g.TimestampHeader)
		if ts != "" {
			sec, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				return "", fmt.Errorf("%s %q is not a Unix time", g.TimestampHeader, ts)
			}
			if age := time.Since(time.Unix(sec, 0)); age > g.ReplayWindow || age < -g.ReplayWindow {
				return "", fmt.Errorf("%s is %s away from now, outside the %s replay window", g.TimestampHeader, age.Round(time.Second), g.ReplayWindow)
			}
		}
		want := GrafanaSignature(g.WebhookSecret, ts, body)
		if !hmac.Equal([]byte(strings.ToLower(sig)), []byte(want)) {
			return "", fmt.Errorf("bad %s", g.SignatureHeader)
		}
		return "grafana", nil
	}
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if t, found := cfg.Token(secret); ok && found && t.Allows(config.ScopePause) {
		return "token:" + t.Name, nil
	}
	return "", fmt.Errorf("a valid %s signature or a bearer token with the pause scope is required", g.SignatureHeader)
}

// grafanaHook turns Grafana Alerting notifications into holds: a firing
// alert holds the job in its throttled_job label (or the group in
// throttled_group, or every job), keyed by the alert's fingerprint; a
// resolved one releases exactly that hold. Repeats renew, and a firing
// delivered after its own resolve is ignored.
func (s *Server) grafanaHook(w http.ResponseWriter, r *http.Request, _ config.Token) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "body too large")
		return
	}
	who, err := s.authGrafana(r, body)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="throttled"`)
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	var p GrafanaPayload
	if err := json.Unmarshal(body, &p); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	ttl := s.config().Grafana.HoldTTL
	result := map[string]int{"added": 0, "renewed": 0, "ignored": 0, "released": 0}
	for i, a := range p.Alerts {
		key := a.Fingerprint
		if key == "" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("alerts[%d]: no fingerprint", i))
			return
		}
		key = "grafana:" + key
		actor := who + "/" + a.Labels["alertname"]
		switch a.Status {
		case "firing":
			scope := throttle.AllJobs()
			if j := a.Labels["throttled_job"]; j != "" {
				scope = throttle.OneJob(throttle.Job(j))
			} else if g := a.Labels["throttled_group"]; g != "" {
				scope = throttle.Group(g)
			}
			reason := a.Annotations["summary"]
			if reason == "" {
				reason = "Grafana alert " + a.Labels["alertname"] + " is firing"
			}
			_, res, err := s.store.AddExternal(r.Context(), key, a.StartsAt, holds.Request{Scope: scope, Source: throttle.SourceGrafanaAlert,
				Reason: reason, Actor: actor, TTL: ttl})
			if err != nil {
				status := http.StatusInternalServerError
				if errors.Is(err, holds.ErrInvalid) {
					status = http.StatusBadRequest
				}
				writeError(w, status, fmt.Sprintf("alerts[%d]: %v", i, err))
				return
			}
			result[string(res)]++
		case "resolved":
			released, err := s.store.ReleaseExternal(r.Context(), key, a.EndsAt, actor, throttle.SourceGrafanaAlert, "Grafana alert resolved")
			if err != nil {
				writeError(w, http.StatusInternalServerError, fmt.Sprintf("alerts[%d]: %v", i, err))
				return
			}
			if released {
				result["released"]++
			} else {
				result["ignored"]++
			}
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("alerts[%d]: status %q: want firing or resolved", i, a.Status))
			return
		}
	}
	writeJSON(w, http.StatusOK, result)
}
