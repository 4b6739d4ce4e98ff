package signals

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Prometheus signals read the latency users feel where it is measured:
// the application's own request-duration histogram, its apdex or its
// error rate, as Prometheus holds them, through its HTTP API
// (/api/v1/query, client_golang's api/prometheus/v1). Thanos, Mimir and
// VictoriaMetrics serve the same API; throttled is tested against
// Prometheus only.
//
// Each signal is one PromQL expression that must give one number: a
// scalar, or a vector of exactly one series. What it may not read as
// fine, it fails (the rules that read it fail closed):
//   - more than one series, or a range vector or a string: a failed sample
//     naming the signal, its Source and the series count;
//   - a query Prometheus refuses (its own words), an unreachable address,
//     credentials refused (401/403; the credentials are never shown), a
//     TLS failure, a reading that runs out of its Timeout, an answer over
//     1 MiB (maxAnswer), a redirect to another origin (authTransport);
//   - NaN (histogram_quantile over no observations) or ±Inf, unless the
//     signal's Traffic expression reads under MinTraffic: then the sample
//     says there is no foreground (Sample.NoForeground), and the rule on
//     it does not bind;
//   - a series none of whose data is fresh: the sample is dated by the
//     newest sample of the series it reads (timestamp()), each at its own
//     offset, not by the time Prometheus answered, so a rule's max_age
//     judges the data's age. The @ modifier is refused at load
//     (datedSelectors).
//
// A signal whose query gives no series before any has answered is
// warming up (ErrWarmingUp: a new series, or rate() still waiting for
// its second sample) for up to a minute, or twice its Delay; after that,
// or once it has answered, no series is a failed sample.
//
// With Baseline job-free (the default) the value is a ratio over the
// reading while no job was at work (baseline.go).

// PrometheusConfig is where the Prometheus signals are read, and the
// signals. The zero value reads none.
type PrometheusConfig struct {
	// Address is Prometheus's base URL, such as http://127.0.0.1:9090.
	// http or https, without a user or password (give BasicUser and
	// BasicPassword: an address is shown in errors).
	Address string
	// Timeout bounds each reading: its query, traffic and dating query
	// share one deadline, and the signals due together are read
	// together. Prometheus's own timeout parameter is Timeout too.
	// Defaults to 2s.
	Timeout time.Duration
	// BearerToken, when set, is sent as "Authorization: Bearer". Never
	// shown in an error, a log line or a metric.
	BearerToken string
	// BasicUser and BasicPassword, when set, authenticate with HTTP basic
	// auth; not with BearerToken. The password is never shown.
	BasicUser, BasicPassword string
	// CAFile is a PEM file of the certificate authorities to trust for
	// an https Address, instead of the system's.
	CAFile string
	// BaselineWindow is how long the last job-free baseline stands in
	// while jobs work without a rest long enough to measure another (the
	// signal's Delay). Past it the ratio is unknown (ErrWarmingUp) and a
	// required rule holds the jobs until it is measured again. Defaults to
	// 10m: a rest costs Delay, so every window costs Delay/BaselineWindow
	// of the jobs' time (5 % at the defaults).
	BaselineWindow time.Duration
	// Signals are the signals read there.
	Signals []PrometheusSignal
}

// Baseline says what a Prometheus signal's value is compared with.
type Baseline string

// Baselines.
const (
	// BaselineJobFree: the value is the reading over its level while no
	// job was at work, 1.0 at it; a rule's target is a ratio above 1.
	BaselineJobFree Baseline = "job-free"
	// BaselineNone: the value is the reading itself; a rule's target is
	// in the signal's unit.
	BaselineNone Baseline = "none"
)

// PrometheusSignal is one Prometheus signal.
type PrometheusSignal struct {
	// Name is the signal's name: lower case letters, digits and '_',
	// starting with a letter, and none of [Names].
	Name Name
	// Query is the PromQL expression: one number, such as
	// histogram_quantile(0.99, sum(rate(http_request_duration_seconds_bucket{job="api"}[15s])) by (le)).
	// Aggregate across instances (sum by (le)) before the quantile:
	// restarts make new series.
	Query string
	// Traffic, optional, is a PromQL expression of the foreground's rate,
	// such as sum(rate(http_request_duration_seconds_count{job="api"}[15s])).
	// Under MinTraffic the reading is "no foreground": the signal does
	// not bind, and a NaN of Query is no failure.
	Traffic string
	// MinTraffic is the rate under which Traffic reads no foreground, in
	// its unit (requests per second). 0 with Traffic set means only a
	// traffic of 0 is none.
	MinTraffic float64
	// Every is how often it is read. Defaults to 1s.
	Every time.Duration
	// Unit is the reading's unit, such as seconds.
	Unit Unit
	// Baseline is BaselineJobFree (the default) or BaselineNone.
	Baseline Baseline
	// Delay is how long a job's work takes to show in the reading and to
	// leave it: Prometheus's scrape interval plus the query's rate()
	// window. A reading is job-free when no job was at work for Delay
	// before its data. Defaults to 30s (a 15s scrape and a 15s window).
	Delay time.Duration
	// Source is where it was defined (file:line), for its errors.
	Source string
	// Optional says no rule requires the signal (required = false): a
	// failed reading at start is then no error of [Poller.Connect], and
	// [SplitOptional] sets it apart in [CheckPrometheus]'s, so a
	// Prometheus that a non-essential signal reads, down, never keeps the
	// sampler (or `throttled run`, its pauses and its pages) from
	// starting. Its failed samples are judged by its rule as any
	// signal's are.
	Optional bool
}

// Prometheus signal defaults.
const (
	DefaultPrometheusTimeout        = 2 * time.Second
	DefaultPrometheusEvery          = time.Second
	DefaultPrometheusDelay          = 30 * time.Second
	DefaultPrometheusBaselineWindow = 10 * time.Minute
)

// ErrWarmingUp marks a sample of a signal still learning what to compare
// with, or still waiting for its first data: unusable, and no failure.
// The controller holds the jobs a required rule on it binds (warming_up),
// with no event and no page. [ErrBaselineWarmup] is the canary's.
var ErrWarmingUp = errors.New("signals: warming up")

// ErrCredentialsRefused marks a Prometheus reading refused for its
// credentials (HTTP 401 or 403). The credentials are never in its text.
var ErrCredentialsRefused = errors.New("signals: credentials refused")

// ValidName reports whether n may name a signal of the operator's own (a
// custom or a Prometheus signal): lower case letters, digits and '_',
// starting with a letter, at most 63, and not one of [Names].
func ValidName(n Name) bool { return customName.MatchString(string(n)) && !Known(n) }

// Problems says what is wrong with c, in words, or nil. Each signal's
// problems name it.
func (c PrometheusConfig) Problems() []string {
	if len(c.Signals) == 0 {
		return nil
	}
	var out []string
	u, err := url.Parse(c.Address)
	switch {
	case c.Address == "":
		out = append(out, "address is required, such as http://127.0.0.1:9090")
	case err != nil:
		out = append(out, fmt.Sprintf("address: %v", err))
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		out = append(out, fmt.Sprintf("address %q: want an http or https URL with a host, such as http://127.0.0.1:9090", redactURL(u)))
	case u.User != nil:
		out = append(out, "address: carries a user; give it as basic auth (an address is shown in errors)")
	case u.RawQuery != "" || u.Fragment != "":
		out = append(out, "address: want no query or fragment; the base URL Prometheus's /api/v1 sits under")
	}
	if err == nil && c.CAFile != "" && u.Scheme != "https" {
		out = append(out, "ca_file is set and the address is not https")
	}
	if c.BearerToken != "" && (c.BasicUser != "" || c.BasicPassword != "") {
		out = append(out, "both a bearer token and basic auth: give one")
	}
	if c.BasicPassword != "" && c.BasicUser == "" {
		out = append(out, "basic auth: a password without a user")
	}
	if c.Timeout < 0 || c.BaselineWindow < 0 {
		out = append(out, "timeout and baseline_window must not be negative")
	}
	seen := map[Name]bool{}
	for _, s := range c.Signals {
		for _, p := range s.Problems() {
			out = append(out, s.where()+": "+p)
		}
		if seen[s.Name] {
			out = append(out, s.where()+": defined twice")
		}
		seen[s.Name] = true
	}
	return out
}

// Problems says what is wrong with s, in words, or nil.
func (s PrometheusSignal) Problems() []string {
	var out []string
	switch {
	case !customName.MatchString(string(s.Name)):
		out = append(out, fmt.Sprintf("name %q: want lower case letters, digits and '_', starting with a letter, at most 63", s.Name))
	case Known(s.Name):
		out = append(out, fmt.Sprintf("name %q is a built-in signal", s.Name))
	}
	if strings.TrimSpace(s.Query) == "" {
		out = append(out, "query is empty")
	}
	for _, e := range []struct{ field, expr string }{{"query", s.Query}, {"traffic", s.Traffic}} {
		_, problems := datedSelectors(e.expr)
		for _, p := range problems {
			out = append(out, e.field+": "+p)
		}
	}
	if s.Traffic == "" && s.MinTraffic != 0 {
		out = append(out, "min_traffic without traffic: give the expression of the foreground's rate it applies to")
	}
	if s.MinTraffic < 0 || math.IsNaN(s.MinTraffic) || math.IsInf(s.MinTraffic, 0) {
		out = append(out, fmt.Sprintf("min_traffic must be 0 or a positive rate, got %v", s.MinTraffic))
	}
	if s.Every < 0 || s.Delay < 0 {
		out = append(out, "every and delay must not be negative")
	}
	switch s.Baseline {
	case "", BaselineJobFree, BaselineNone:
	default:
		out = append(out, fmt.Sprintf("baseline %q: want %q or %q", s.Baseline, BaselineJobFree, BaselineNone))
	}
	return out
}

func (s PrometheusSignal) where() string {
	if s.Source == "" {
		return fmt.Sprintf("prometheus signal %q", s.Name)
	}
	return fmt.Sprintf("prometheus signal %q (%s)", s.Name, s.Source)
}

// JobFree reports whether s's value is a ratio over its job-free level.
func (s PrometheusSignal) JobFree() bool { return s.Baseline != BaselineNone }

func (c *PrometheusConfig) fill() {
	c.Timeout = cmp.Or(c.Timeout, DefaultPrometheusTimeout)
	c.BaselineWindow = cmp.Or(c.BaselineWindow, DefaultPrometheusBaselineWindow)
	c.Signals = slices.Clone(c.Signals)
	for i, s := range c.Signals {
		s.Every = cmp.Or(s.Every, DefaultPrometheusEvery)
		s.Delay = cmp.Or(s.Delay, DefaultPrometheusDelay)
		s.Baseline = cmp.Or(s.Baseline, BaselineJobFree)
		c.Signals[i] = s
	}
}

// maxAnswer bounds the body of each of Prometheus's answers, read before
// anything decodes it: one number, or the dating query's one series per
// selector, is a few hundred bytes, and a query of thousands of series
// is refused having read 1 MiB, not decoded in hundreds (client_golang
// reads a whole body, then decodes it all).
const maxAnswer = 1 << 20

// errAnswerTooLarge fails a reading whose answer is over maxAnswer.
var errAnswerTooLarge = fmt.Errorf("answer over %d MiB: the query returns too many series; aggregate them (sum, max, sum by (le) before histogram_quantile)", maxAnswer>>20)

// transport is the HTTP transport of c: its CA file; its credentials on
// every request to its origin, and no request to another; each answer
// bounded by maxAnswer.
func (c PrometheusConfig) transport() (http.RoundTripper, error) {
	u, err := url.Parse(c.Address)
	if err != nil {
		return nil, fmt.Errorf("address: %w", err)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// The signals due together are read together (promSampler.sample).
	t.MaxIdleConnsPerHost = max(http.DefaultMaxIdleConnsPerHost, len(c.Signals))
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", c.CAFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &authTransport{next: t, address: redactURL(u), origin: origin(u),
		token: c.BearerToken, user: c.BasicUser, password: c.BasicPassword}, nil
}

// authTransport sends requests to the configured origin only, with the
// credentials; turns a 401 or 403 into ErrCredentialsRefused before
// anything reads the body (which might echo what was sent); and bounds
// every other answer's body by maxAnswer.
//
// A request to another origin is a redirect the client followed. Go's
// client drops the credentials it was given on a redirect to another
// host, but these are added here, to each request: they would reach a
// host never configured, and its answer be taken as data. It is refused,
// not sent. A redirect within the origin (a path prefix) is followed,
// with the credentials.
type authTransport struct {
	next                  http.RoundTripper
	address, origin       string
	token, user, password string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if to := origin(req.URL); to != t.origin {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &originError{address: t.address, to: to}
	}
	req = req.Clone(req.Context())
	switch {
	case t.token != "":
		req.Header.Set("Authorization", "Bearer "+t.token)
	case t.user != "":
		req.SetBasicAuth(t.user, t.password)
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		resp.Body.Close()
		how := "no credentials were sent"
		switch {
		case t.token != "":
			how = "the bearer token was sent (not shown)"
		case t.user != "":
			how = fmt.Sprintf("basic auth as %q was sent (the password is not shown)", t.user)
		}
		return nil, fmt.Errorf("%w: Prometheus answered %s; %s", ErrCredentialsRefused, resp.Status, how)
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: maxAnswer}
	return resp, nil
}

// origin is u's scheme, host and port (the scheme's own when u has
// none), in lower case: what the credentials are bound to.
func origin(u *url.URL) string {
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// originError is a request to an origin other than the configured one,
// refused: a redirect to another scheme, host or port.
type originError struct {
	// address is the configured address; to, the other origin.
	address, to string
}

func (e *originError) Error() string {
	return fmt.Sprintf("%s redirected the query to another origin (%s): refused, not followed; the credentials go only to the configured address's scheme, host and port", e.address, e.to)
}

// boundedBody fails a read past left bytes with errAnswerTooLarge.
type boundedBody struct {
	io.ReadCloser
	left int64 // negative once past the bound
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more tells the bound is passed
	}
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		n, b.left = int(b.left), -1
		return n, errAnswerTooLarge
	}
	b.left -= int64(n)
	return n, err
}

// credentialForms are the texts that would show c's credentials in an
// answer that echoes the request: each secret as it is and as the
// request carried it (base64 of user:password, standard and URL
// alphabets, padded and raw), and each of those URL-escaped, quoted (Go
// and JSON) and HTML-escaped; longest first. Forms under 4 bytes are
// left out: they would redact ordinary words.
func (c PrometheusConfig) credentialForms() []string {
	var raw []string
	if c.BearerToken != "" {
		raw = append(raw, c.BearerToken)
	}
	if c.BasicPassword != "" {
		up := []byte(c.BasicUser + ":" + c.BasicPassword)
		raw = append(raw, c.BasicPassword,
			base64.StdEncoding.EncodeToString(up), base64.URLEncoding.EncodeToString(up),
			base64.RawStdEncoding.EncodeToString(up), base64.RawURLEncoding.EncodeToString(up))
	}
	var out []string
	for _, s := range raw {
		q := strconv.Quote(s)
		j, _ := json.Marshal(s)
		for _, f := range []string{s, url.QueryEscape(s), url.PathEscape(s), q[1 : len(q)-1], string(j[1 : len(j)-1]), html.EscapeString(s)} {
			if len(f) >= 4 && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// redactURL is u without its password, for errors.
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Redacted()
}
