package sidecar

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/textsafe"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
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

// preauthGrafana checks what the headers alone can show, before the body
// is read: a signature with a fresh timestamp (a timestamp is required
// unless grafana.allow_unstamped_signatures is set), or a bearer token
// with the pause scope. A request that fails here takes no capacity.
func (s *Server) preauthGrafana(r *http.Request, cfg *config.Config) error {
	g := cfg.Grafana
	if r.Header.Get(g.SignatureHeader) != "" && g.WebhookSecret != "" {
		ts := r.Header.Get(g.TimestampHeader)
		if ts == "" {
			if g.AllowUnstampedSignatures {
				return nil
			}
			return fmt.Errorf("%s is required: a signature over the body alone could be replayed forever "+
				"(grafana.allow_unstamped_signatures = true accepts it, for Grafana versions that send no timestamp)", g.TimestampHeader)
		}
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return fmt.Errorf("%s %q is not a Unix time", g.TimestampHeader, ts)
		}
		if age := time.Since(time.Unix(sec, 0)); age > g.ReplayWindow || age < -g.ReplayWindow {
			return fmt.Errorf("%s is %s away from now, outside the %s replay window", g.TimestampHeader, age.Round(time.Second), g.ReplayWindow)
		}
		return nil
	}
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if t, found := cfg.Token(secret); ok && found && t.Allows(config.ScopePause) {
		return nil
	}
	return fmt.Errorf("a valid %s signature or a bearer token with the pause scope is required", g.SignatureHeader)
}

// authGrafana accepts a request preauthGrafana let in whose signature
// matches its body, or whose bearer token has the pause scope, and names
// who sent it.
func (s *Server) authGrafana(r *http.Request, body []byte) (string, error) {
	cfg := s.config()
	if err := s.preauthGrafana(r, cfg); err != nil {
		return "", err
	}
	g := cfg.Grafana
	if sig := r.Header.Get(g.SignatureHeader); sig != "" && g.WebhookSecret != "" {
		want := GrafanaSignature(g.WebhookSecret, r.Header.Get(g.TimestampHeader), body)
		if !hmac.Equal([]byte(strings.ToLower(sig)), []byte(want)) {
			return "", fmt.Errorf("bad %s", g.SignatureHeader)
		}
		return "grafana", nil
	}
	secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	t, _ := cfg.Token(secret)
	return "token:" + t.Name, nil
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
	// Grafana sends more than the hook reads, so unknown keys pass; a key
	// twice or in another case does not.
	var p GrafanaPayload
	if err := decodeStrict(body, &p, false); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ops, err := planGrafana(p, who, s.config().Grafana.HoldTTL, s.db.Holds().Check)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// Every alert is checked; apply them. Each is idempotent (keyed by
	// its fingerprint), so after a database failure Grafana's retry of
	// the whole notification completes it.
	var result api.HookResult
	for _, op := range ops {
		if op.firing {
			_, res, err := s.db.Holds().AddExternal(r.Context(), op.key, op.at, op.req)
			if err != nil {
				writeError(w, http.StatusInternalServerError, fmt.Sprintf("alerts[%d]: %v", op.index, err))
				return
			}
			switch res {
			case holds.ExternalAdded:
				result.Added++
			case holds.ExternalRenewed:
				result.Renewed++
			default:
				result.Ignored++
			}
			continue
		}
		released, err := s.db.Holds().ReleaseExternal(r.Context(), op.key, op.at, op.req.Actor, hold.SourceGrafanaAlert, "Grafana alert resolved")
		if err != nil {
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("alerts[%d]: %v", op.index, err))
			return
		}
		if released {
			result.Released++
		} else {
			result.Ignored++
		}
	}
	writeJSON(w, http.StatusOK, result)
}

// maxFingerprint bounds an alert's fingerprint (Grafana's are 16 hex
// digits), well within what the key's index can hold.
const maxFingerprint = 256

// grafanaOp is one alert of a notification, checked and ready to apply.
type grafanaOp struct {
	index  int    // in the notification's alerts
	key    string // grafana:<fingerprint>
	firing bool
	at     time.Time    // StartsAt when firing, EndsAt when resolved
	req    hold.Request // the hold a firing alert makes; Actor for both
}

// planGrafana checks every alert of a notification before any is applied,
// so a notification with one bad alert changes nothing: a fingerprint
// each, a status of firing or resolved, and for a firing one a hold the
// store accepts (check), its scope from the throttled_job or
// throttled_group label, else every job.
func planGrafana(p GrafanaPayload, who string, ttl time.Duration, check func(hold.Request) error) ([]grafanaOp, error) {
	ops := make([]grafanaOp, 0, len(p.Alerts))
	for i, a := range p.Alerts {
		switch err := hold.Storable(a.Fingerprint); {
		case a.Fingerprint == "":
			return nil, fmt.Errorf("alerts[%d]: no fingerprint", i)
		case len(a.Fingerprint) > maxFingerprint:
			return nil, fmt.Errorf("alerts[%d]: fingerprint of %d bytes; at most %d", i, len(a.Fingerprint), maxFingerprint)
		case err != nil:
			return nil, fmt.Errorf("alerts[%d]: fingerprint: %w", i, err)
		}
		if err := hold.Storable(a.Labels["alertname"]); err != nil {
			return nil, fmt.Errorf("alerts[%d]: alertname: %w", i, err)
		}
		op := grafanaOp{index: i, key: "grafana:" + a.Fingerprint}
		op.req.Actor = who + "/" + a.Labels["alertname"]
		switch a.Status {
		case "firing":
			scope := hold.AllJobs()
			if j := a.Labels["throttled_job"]; j != "" {
				scope = hold.OneJob(j)
			} else if g := a.Labels["throttled_group"]; g != "" {
				scope = hold.Group(g)
			}
			reason := textsafe.OneLine(a.Annotations["summary"]) // a summary's lines, one reason's line
			if strings.TrimSpace(reason) == "" {
				reason = "Grafana alert " + a.Labels["alertname"] + " is firing"
			}
			op.firing, op.at = true, a.StartsAt
			op.req = hold.Request{Scope: scope, Source: hold.SourceGrafanaAlert, Reason: reason, Actor: op.req.Actor, TTL: ttl}
			if err := check(op.req); err != nil {
				return nil, fmt.Errorf("alerts[%d]: %w", i, err)
			}
		case "resolved":
			op.at = a.EndsAt
		default:
			return nil, fmt.Errorf("alerts[%d]: status %q: want firing or resolved", i, a.Status)
		}
		ops = append(ops, op)
	}
	return ops, nil
}
