package signals

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// promSampler reads the Prometheus signals, each when due.
type promSampler struct {
	cfg     PrometheusConfig
	api     v1.API
	signals []*promSignal
	// jobs says when a job was last seen at work, for the baselines.
	jobs func() jobWatch
}

// jobWatch is what the poller knows of the jobs' work on the primary.
type jobWatch struct {
	// from is when the poller began to watch (its first primary sample
	// since it last started); seen is when it last saw a job at work, or
	// could not tell; last is its last primary round.
	from, seen, last time.Time
}

// idleSince reports whether no job was at work from t-d to t, as far as
// w has watched.
func (w jobWatch) idle(t time.Time, d time.Duration) bool {
	start := t.Add(-d)
	return !w.from.IsZero() && !w.from.After(start) && w.seen.Before(start)
}

// promSignal is one signal's state.
type promSignal struct {
	PrometheusSignal
	// fresh dates the data: the newest sample of each selector of Query
	// and Traffic ("" with none).
	fresh    string
	nsel     int
	due      time.Time
	last     Sample
	answered bool      // a reading has had a series
	since    time.Time // the first reading
	base     appBaseline
}

func newPromSampler(cfg PrometheusConfig, jobs func() jobWatch) (*promSampler, error) {
	if ps := cfg.Problems(); len(ps) > 0 {
		return nil, fmt.Errorf("prometheus: %s", strings.Join(ps, "; "))
	}
	cfg.fill()
	rt, err := cfg.transport()
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	client, err := api.NewClient(api.Config{Address: cfg.Address, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus: address: %w", err)
	}
	if jobs == nil {
		jobs = func() jobWatch { return jobWatch{} }
	}
	s := &promSampler{cfg: cfg, api: v1.NewAPI(client), jobs: jobs}
	for _, x := range cfg.Signals {
		// Each selector at its own offset (Problems refused @).
		sels, _ := datedSelectors(x.Query)
		traffic, _ := datedSelectors(x.Traffic)
		for _, t := range traffic {
			if !containsString(sels, t) {
				sels = append(sels, t)
			}
		}
		s.signals = append(s.signals, &promSignal{PrometheusSignal: x, fresh: freshnessQuery(sels), nsel: len(sels)})
	}
	return s, nil
}

func containsString(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// freshnessQuery asks for the newest sample of each selector, at its own
// offset (datedSelectors), one series each, labelled by the selector's
// index.
func freshnessQuery(sels []string) string {
	var parts []string
	for i, s := range sels {
		parts = append(parts, fmt.Sprintf(`label_replace(max(timestamp(%s)), "throttled_selector", "%d", "", "")`, s, i))
	}
	return strings.Join(parts, " or ")
}

func (s *promSampler) id() string      { return "prometheus" }
func (s *promSampler) server() *server { return nil }

// sample reads each signal that is due, all together (the round takes
// as long as its slowest reading, at most the Timeout), and returns
// every one's latest sample: a signal not due keeps its last, which ages
// toward its rule's max_age.
func (s *promSampler) sample(ctx context.Context, now func() time.Time) []Sample {
	var wg sync.WaitGroup
	for _, x := range s.signals {
		if t := now(); !t.Before(x.due) {
			x.due = t.Add(x.Every)
			wg.Go(func() { x.last = s.read(ctx, x, now) })
		}
	}
	wg.Wait()
	out := make([]Sample, 0, len(s.signals))
	for _, x := range s.signals {
		out = append(out, x.last)
	}
	return out
}

// preflight reads every signal once, as Connect does: a failed reading
// (not one warming up) of a signal that is not Optional is an error.
func (s *promSampler) preflight(ctx context.Context) error {
	required, _ := SplitOptional(s.check(ctx))
	return required
}

// check reads every signal once, all together (so within one Timeout):
// each failed reading (not one warming up) is a *PrometheusError, in the
// signals' order.
func (s *promSampler) check(ctx context.Context) error {
	errs := make([]error, len(s.signals))
	var wg sync.WaitGroup
	for i, x := range s.signals {
		wg.Go(func() {
			if r := s.read(ctx, x, time.Now); r.Err != nil && !errors.Is(r.Err, ErrWarmingUp) {
				errs[i] = &PrometheusError{Signal: x.Name, Optional: x.Optional, Err: r.Err}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PrometheusError is a Prometheus signal's failed reading at start, from
// [CheckPrometheus]: Err names the signal, its Source and why.
type PrometheusError struct {
	Signal Name
	// Optional is the signal's: its rule does not require it.
	Optional bool
	Err      error
}

func (e *PrometheusError) Error() string { return e.Err.Error() }
func (e *PrometheusError) Unwrap() error { return e.Err }

// SplitOptional splits an error of [CheckPrometheus] into the failures of
// the signals a rule requires (and any other error) and those of Optional
// ones, each joined, or nil.
func SplitOptional(err error) (required, optional error) {
	if err == nil {
		return nil, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var req, opt []error
	for _, e := range errs {
		if pe, ok := e.(*PrometheusError); ok && pe.Optional {
			opt = append(opt, e)
		} else {
			req = append(req, e)
		}
	}
	return errors.Join(req...), errors.Join(opt...)
}

// CheckPrometheus reads every signal of cfg once, as the sampler would,
// and returns each failure naming its signal and Source, each a
// *PrometheusError: a query Prometheus refuses, more than one series, a
// non-scalar result, an unreachable address, refused credentials, a TLS
// failure. A signal still warming up (no series yet) passes. The
// configuration's live check uses it, and [SplitOptional] tells the
// failures that must keep `run` from starting from those of Optional
// signals, which never do.
func CheckPrometheus(ctx context.Context, cfg PrometheusConfig) error {
	if len(cfg.Signals) == 0 {
		return nil
	}
	s, err := newPromSampler(cfg, nil)
	if err != nil {
		return fmt.Errorf("signals: %w", err)
	}
	return s.check(ctx)
}

// read takes one reading of x.
func (s *promSampler) read(ctx context.Context, x *promSignal, now func() time.Time) Sample {
	start := now()
	if x.since.IsZero() {
		x.since = start
	}
	// One deadline for the whole reading, its query, traffic and dating
	// query together: a reading takes at most the Timeout.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	fail := func(err error) Sample {
		return failed(x.Name, nil, x.unit(), now(), fmt.Errorf("%s: %w", x.where(), s.redact(err)))
	}
	v, at, n, err := s.scalar(ctx, x.Query)
	if err != nil {
		return fail(fmt.Errorf("query: %w", err))
	}
	noForeground := false
	if x.Traffic != "" {
		tv, tat, tn, err := s.scalar(ctx, x.Traffic)
		switch {
		case err != nil:
			return fail(fmt.Errorf("traffic: %w", err))
		case tn == 0:
			if w := x.warming(start); w != "" {
				return failed(x.Name, nil, x.unit(), now(), fmt.Errorf("%s: %w: traffic: no series yet (%s)", x.where(), ErrWarmingUp, w))
			}
			return fail(errors.New("traffic: no series: the foreground's rate is unknown"))
		case math.IsNaN(tv) || math.IsInf(tv, 0):
			return fail(fmt.Errorf("traffic: read %v; the foreground's rate must be a finite number", tv))
		case (tv < x.MinTraffic || tv == 0) && (n == 0 || math.IsNaN(v)):
			// No foreground only where the reading has no observations
			// (histogram_quantile over none is NaN) and the traffic says
			// so. A finite reading at low traffic is the foreground's
			// own, however few requests made it: a stalled application
			// completes few requests, each slowly, and that is when its
			// users suffer most.
			noForeground, at = true, tat
		}
	}
	switch {
	case noForeground:
	case n == 0:
		if w := x.warming(start); w != "" {
			return failed(x.Name, nil, x.unit(), now(), fmt.Errorf("%s: %w: no series yet (%s)", x.where(), ErrWarmingUp, w))
		}
		return fail(errors.New("query: no series: a series it read has ended, or its metric names or labels match nothing"))
	case math.IsNaN(v):
		why := "and no traffic expression says there is no foreground: set traffic and min_traffic to tell no requests from a broken query"
		if x.Traffic != "" {
			why = "while the traffic is at or over min_traffic: the reading is broken, not idle"
		}
		return fail(fmt.Errorf("query: read NaN %s", why))
	case math.IsInf(v, 0):
		return fail(fmt.Errorf("query: read %v; a histogram_quantile in its +Inf bucket needs a larger bucket", v))
	}
	x.answered = true
	dataAt, err := s.dataTime(ctx, x)
	if err != nil {
		return fail(err)
	}
	if !dataAt.IsZero() && dataAt.Before(at) {
		at = dataAt
	}
	if noForeground {
		return Sample{Name: x.Name, Unit: x.unit(), At: at, NoForeground: true}
	}
	if !x.JobFree() {
		return Sample{Name: x.Name, Value: v, Raw: v, Unit: x.Unit, At: at}
	}
	x.base.observe(v, at, s.jobs().idle(at, x.Delay))
	ratio, err := x.base.ratio(v, at, s.cfg.BaselineWindow, x.Delay)
	if err != nil {
		return failed(x.Name, nil, x.unit(), now(), fmt.Errorf("%s: %w", x.where(), err))
	}
	return Sample{Name: x.Name, Value: ratio, Raw: ratio, Unit: UnitRatio, At: at, Baseline: x.base.value}
}

// unit is the unit of x's samples: a ratio over the job-free level, or
// its own.
func (x *promSignal) unit() Unit {
	if x.JobFree() {
		return UnitRatio
	}
	return x.Unit
}

// warming says, when x may still be waiting for its first series, for how
// long it has, or "" when it may not: after a series has answered, or
// after a minute (twice Delay if longer) of none.
func (x *promSignal) warming(now time.Time) string {
	limit := max(time.Minute, 2*x.Delay)
	if x.answered || now.Sub(x.since) > limit {
		return ""
	}
	return fmt.Sprintf("for %s of at most %s", now.Sub(x.since).Round(time.Second), limit)
}

// scalar runs q as an instant query at Prometheus's own time, bounded by
// the timeout (and by ctx's deadline, the reading's), and returns its one number, its timestamp and its series
// count (0 for an empty vector, when v means nothing).
func (s *promSampler) scalar(ctx context.Context, q string) (v float64, at time.Time, n int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	res, _, _, err := s.api.Query(ctx, q, time.Time{}, v1.WithTimeout(s.cfg.Timeout))
	if err != nil {
		return 0, time.Time{}, 0, s.classify(ctx, err)
	}
	switch r := res.(type) {
	case *model.Scalar:
		return float64(r.Value), r.Timestamp.Time(), 1, nil
	case model.Vector:
		switch len(r) {
		case 0:
			return 0, time.Time{}, 0, nil
		case 1:
			return float64(r[0].Value), r[0].Timestamp.Time(), 1, nil
		}
		return 0, time.Time{}, len(r), fmt.Errorf("%d series, want one: aggregate them (sum, max, sum by (le) before histogram_quantile); the first is %s", len(r), r[0].Metric)
	case nil:
		return 0, time.Time{}, 0, errors.New("no result")
	}
	return 0, time.Time{}, 0, fmt.Errorf("a %s result, want one number (a scalar or one series of an instant vector)", res.Type())
}

// dataTime is the time of x's data: the oldest of the newest samples of
// the selectors it reads; zero when it reads none (vector(1)).
func (s *promSampler) dataTime(ctx context.Context, x *promSignal) (time.Time, error) {
	if x.fresh == "" {
		return time.Time{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	res, _, _, err := s.api.Query(ctx, x.fresh, time.Time{}, v1.WithTimeout(s.cfg.Timeout))
	if err != nil {
		return time.Time{}, fmt.Errorf("date the data (the newest sample of each series it reads): %w", s.classify(ctx, err))
	}
	vec, ok := res.(model.Vector)
	if !ok {
		return time.Time{}, fmt.Errorf("date the data: a %s result", res.Type())
	}
	if len(vec) < x.nsel {
		return time.Time{}, fmt.Errorf("a series it reads has no sample within Prometheus's lookback, or was marked stale: %d of %d selectors have data", len(vec), x.nsel)
	}
	var oldest time.Time
	for _, e := range vec {
		// timestamp() is in seconds; Prometheus keeps milliseconds.
		t := time.UnixMilli(int64(math.Round(float64(e.Value) * 1000)))
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, nil
}

// classify says what err is, in words: a refused query in Prometheus's
// own, a timeout, an unreachable address, a TLS failure, refused
// credentials.
func (s *promSampler) classify(ctx context.Context, err error) error {
	var apiErr *v1.Error
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var authErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var opErr *net.OpError
	var originErr *originError
	switch {
	case errors.As(err, &originErr):
		return originErr // not the url.Error around it: the other origin's path and query
	case errors.Is(err, errAnswerTooLarge):
		return errAnswerTooLarge
	case errors.Is(err, ErrCredentialsRefused):
		return err
	case errors.As(err, &apiErr) && apiErr.Type == v1.ErrBadData:
		return fmt.Errorf("Prometheus refused it: %s", s.echoed(apiErr.Msg))
	case errors.As(err, &apiErr) && apiErr.Type == v1.ErrTimeout,
		errors.Is(err, context.DeadlineExceeded), ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w after %s, the reading's timeout (its queries together): %w", ErrTimeout, s.cfg.Timeout, err)
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &authErr), errors.As(err, &hostErr):
		return fmt.Errorf("TLS failure with %s: %w", s.cfg.Address, err)
	case errors.As(err, &apiErr):
		// Msg only: Detail is the body of an answer not in the API's
		// shape, an auth proxy's page that may echo the request.
		return fmt.Errorf("Prometheus answered %s: %s", apiErr.Type, s.echoed(apiErr.Msg))
	case errors.As(err, &opErr):
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, s.cfg.Address, err)
	}
	return fmt.Errorf("%s: %w", s.cfg.Address, err)
}

// redact removes the credentials from err's text, should anything on
// the way have echoed them, in every form credentialForms lists. An
// error redacted keeps nothing of the original's type but its class.
func (s *promSampler) redact(err error) error {
	msg := err.Error()
	clean := s.redactText(msg)
	if clean == msg {
		return err
	}
	for _, class := range []error{ErrTimeout, ErrUnreachable, ErrCredentialsRefused} {
		if errors.Is(err, class) {
			return fmt.Errorf("%w: %s", class, strconv.Quote(clean))
		}
	}
	return errors.New(clean)
}

func (s *promSampler) redactText(text string) string {
	for _, f := range s.cfg.credentialForms() {
		text = strings.ReplaceAll(text, f, "[redacted]")
	}
	return text
}

// maxEchoed bounds the text of an answer an error carries, in bytes.
const maxEchoed = 512

// authValue is an Authorization header's value: the scheme, then a
// credential (token68, URL-escaped or not). An answer that echoes the
// request may hold one the configuration does not (a proxy's own).
var authValue = regexp.MustCompile(`\b(Basic|Bearer)(\s+|\+|%20)[A-Za-z0-9._~+/%-]{8,}=*`)

// echoed is text of an answer's (Prometheus's own words, or those of
// what stands in front of it) for an error: redacted, without any
// Authorization header's value, and at most maxEchoed bytes.
func (s *promSampler) echoed(text string) string {
	text = authValue.ReplaceAllString(s.redactText(text), "$1 [redacted]")
	if len(text) <= maxEchoed {
		return text
	}
	i := maxEchoed
	for i > 0 && !utf8.RuneStart(text[i]) {
		i--
	}
	return text[:i] + " [cut]"
}
