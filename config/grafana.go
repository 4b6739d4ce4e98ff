package config

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Grafana configures POST /v1/hooks/grafana.
type Grafana struct {
	// WebhookSecret verifies Grafana's HMAC-SHA256 signature; empty means
	// only bearer tokens (scope pause) are accepted.
	WebhookSecret string
	// SignatureHeader and TimestampHeader name Grafana's headers. Default
	// X-Grafana-Alerting-Signature and X-Grafana-Alerting-Timestamp.
	SignatureHeader, TimestampHeader string
	// ReplayWindow is how old a signed timestamp may be. Defaults to 5m.
	ReplayWindow time.Duration
	// HoldTTL is the life of a hold an alert makes, renewed by each
	// repeated notification. Defaults to 1h.
	HoldTTL time.Duration
	// UserHeader, when set, is the header an SSO proxy in front of
	// throttled sets to the signed-in user (for example X-WEBAUTH-USER);
	// the confirm page then trusts it to name the person pausing.
	UserHeader string
	// ReturnURLs are the URL prefixes the confirm page may send a person
	// back to (the Grafana they came from). Their origins are also the
	// only ones a Grafana action may call POST /v1/holds from.
	ReturnURLs []string
	// URL and ServiceAccountToken, when set, make the leader push every
	// hold to Grafana's annotations API as a region, closed on release.
	URL                 string `restart:"grafana url/service_account_token"`
	ServiceAccountToken string `restart:"grafana url/service_account_token"`
	// AllowUnstampedSignatures accepts a signature over the body alone,
	// without a timestamp header: for Grafana versions that sign the body
	// only; such requests can be replayed. Defaults to false: a signed
	// request must carry the timestamp, signed as timestamp + ":" + body.
	AllowUnstampedSignatures bool
}

// buildGrafana reads the grafana block.
func (c *Config) buildGrafana(doc *file, v *validator) {
	c.Grafana = Grafana{SignatureHeader: "X-Grafana-Alerting-Signature", TimestampHeader: "X-Grafana-Alerting-Timestamp",
		ReplayWindow: 5 * time.Minute, HoldTTL: time.Hour}
	if g := doc.Grafana; g != nil {
		c.Grafana.WebhookSecret = v.secret(g.Range, "webhook_secret", g.WebhookSecret, g.WebhookSecretFile)
		if _, unset := Unset(c.Grafana.WebhookSecret); !unset && c.Grafana.WebhookSecret != "" && len(c.Grafana.WebhookSecret) < 16 {
			v.bad(g.Range, "grafana: webhook_secret must be at least 16 characters")
		}
		if g.SignatureHeader != nil {
			c.Grafana.SignatureHeader = *g.SignatureHeader
		}
		if g.TimestampHeader != nil {
			c.Grafana.TimestampHeader = *g.TimestampHeader
		}
		c.Grafana.ReplayWindow = v.duration(g.Range, "replay_window", g.ReplayWindow, c.Grafana.ReplayWindow)
		c.Grafana.HoldTTL = v.duration(g.Range, "hold_ttl", g.HoldTTL, c.Grafana.HoldTTL)
		if g.UserHeader != nil {
			c.Grafana.UserHeader = http.CanonicalHeaderKey(strings.TrimSpace(*g.UserHeader))
			if c.Grafana.UserHeader == "" || strings.ContainsAny(c.Grafana.UserHeader, " :") {
				v.bad(g.Range, "grafana: user_header = %q: want a header name such as X-WEBAUTH-USER", *g.UserHeader)
			}
		}
		for _, r := range g.ReturnURLs {
			u, err := url.Parse(r)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.bad(g.Range, "grafana: return_urls: %q: want an absolute http(s) URL such as https://grafana.example.com/", r)
				continue
			}
			c.Grafana.ReturnURLs = append(c.Grafana.ReturnURLs, r)
		}
		c.Grafana.ServiceAccountToken = v.secret(g.Range, "service_account_token", g.SAToken, g.SATokenFile)
		if g.AllowUnstamped != nil {
			c.Grafana.AllowUnstampedSignatures = *g.AllowUnstamped
		}
		if g.URL != nil {
			u, err := url.Parse(*g.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
				v.bad(g.Range, "grafana: url = %q: want Grafana's base URL such as https://grafana.example.com", shownURL(*g.URL))
			}
			c.Grafana.URL = strings.TrimRight(*g.URL, "/")
		}
		switch {
		case c.Grafana.URL != "" && c.Grafana.ServiceAccountToken == "":
			v.bad(g.Range, "grafana: url needs service_account_token (or service_account_token_file): a Grafana service account token that may write annotations")
		case c.Grafana.URL == "" && c.Grafana.ServiceAccountToken != "":
			v.bad(g.Range, "grafana: service_account_token needs url, Grafana's base URL")
		}
		if c.Grafana.HoldTTL > c.HoldTTL.Max {
			v.bad(g.Range, "grafana: hold_ttl %s exceeds the holds' max_ttl %s", c.Grafana.HoldTTL, c.HoldTTL.Max)
		}
	}
}
