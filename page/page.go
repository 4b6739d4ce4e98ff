// Package page tells a person: when throttled auto-pauses on critical
// load, latches, keeps a signal stale too long, or sees a job not honour a
// pause. Each cause is one deduplicated page, resolved when the cause ends,
// sent to Prometheus Alertmanager (API v2), PagerDuty (Events API v2) or a
// webhook signed with HMAC-SHA256. Delivery runs off the controller's
// path, retried with backoff and a cap: a slow pager never delays a
// decision.
package page

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/status"
)

// Alert is one page, firing or resolved.
type Alert struct {
	// Key deduplicates: one page per cluster and cause.
	Key   string `json:"key"`
	Cause string `json:"cause"` // critical, latched, stale, pause_not_honoured, exempt_critical or primary_changed
	// Cluster names the database cluster.
	Cluster   string           `json:"cluster"`
	Summary   string           `json:"summary"`
	Signal    string           `json:"signal,omitempty"`
	Value     float64          `json:"value,omitempty"`
	Threshold float64          `json:"threshold,omitempty"`
	Jobs      []status.JobRate `json:"jobs,omitempty"`
	// Job is the one job a pause_not_honoured page is about: part of
	// its identity wherever a receiver tells alerts apart by labels.
	Job       string `json:"job,omitempty"`
	Dashboard string `json:"dashboard,omitempty"`
	// Runbook is the page's section of the runbook (docs/RUNBOOK.md).
	Runbook  string    `json:"runbook"`
	Firing   bool      `json:"firing"`
	StartsAt time.Time `json:"starts_at"`
	EndsAt   time.Time `json:"ends_at,omitzero"`
}

// Notifier delivers one alert.
type Notifier interface {
	Notify(ctx context.Context, a Alert) error
}

// Config configures a [Pager].
type Config struct {
	Notifiers []Notifier
	// Cluster names the cluster in every page. Defaults to "postgres".
	Cluster string
	// Dashboard is linked from every page.
	Dashboard string
	// Runbook is the runbook every page links its section of (an anchor
	// per alert name, as #throttledcritical). Defaults to DefaultRunbook.
	Runbook string
	// StaleAfter is how long signals may stay stale before a page.
	// Defaults to 30s.
	StaleAfter time.Duration
	// Resend repeats active alerts (Alertmanager forgets one not resent).
	// Defaults to 1m.
	Resend time.Duration
	// MaxAttempts bounds each delivery. Defaults to 5.
	MaxAttempts int
	// Leading, when set, reports whether this process leads; a process
	// that stops leading forgets its active pages (the new leader owns
	// them) instead of resending them forever.
	Leading func() bool
	Logger  hclog.Logger
}

// Pager turns decisions and enforcement results into pages. Its methods
// never block; Run delivers.
type Pager struct {
	cfg   Config
	log   hclog.Logger
	queue chan Alert

	mu         sync.Mutex
	active     map[string]Alert
	staleSince time.Time
	staleDone  bool
	sent       map[string]int64 // deliveries by notifier kind
	failed     map[string]int64
}

// New returns a Pager.
func New(cfg Config) *Pager {
	cfg.Cluster = cmp.Or(cfg.Cluster, "postgres")
	cfg.StaleAfter = cmp.Or(cfg.StaleAfter, 30*time.Second)
	cfg.Resend = cmp.Or(cfg.Resend, time.Minute)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 5)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Pager{cfg: cfg, log: cfg.Logger, queue: make(chan Alert, 256), active: map[string]Alert{},
		sent: map[string]int64{}, failed: map[string]int64{}}
}

// Decision is what the pager reads of one of the controller's decisions:
// its time and mode, the signal that made it and its reason (for a stale
// page), and its events (the running jobs, with their rates, in those
// that begin a pause).
type Decision struct {
	At      time.Time
	Mode    status.Mode
	Binding status.Binding
	Reason  string
	Events  []status.Event
}

// Decision pages on a decision's events: critical and latched fire,
// recovered and resumed resolve; stale fires once it has lasted
// StaleAfter, and resolves when fresh.
func (p *Pager) Decision(d Decision) {
	for _, e := range d.Events {
		switch e.Kind {
		case status.EventCritical:
			p.fire(Alert{Key: "critical:" + e.Signal, Cause: "critical", Summary: e.Message, Signal: e.Signal, Value: e.Value,
				Threshold: e.Threshold, Jobs: e.Jobs, StartsAt: e.At})
		case status.EventLatched:
			p.fire(Alert{Key: "latched", Cause: "latched", Summary: e.Message, Signal: e.Signal, Value: e.Value, Threshold: e.Threshold,
				Jobs: e.Jobs, StartsAt: e.At})
		case status.EventExemptCritical:
			for _, j := range e.Jobs {
				p.fire(Alert{Key: "exempt_critical:" + string(j.Job), Cause: "exempt_critical", Job: string(j.Job), Summary: e.Message,
					Signal: e.Signal, Jobs: e.Jobs, StartsAt: e.At})
			}
		case status.EventRecovered:
			p.resolvePrefix("critical:", e.At)
			p.resolvePrefix("latched", e.At)
			p.resolvePrefix("exempt_critical:", e.At)
		case status.EventResumed:
			p.resolvePrefix("latched", e.At)
		}
	}
	p.expirePrimaryChanged(d.At)
	p.mu.Lock()
	stale := d.Mode == status.ModeStale
	switch {
	case stale && p.staleSince.IsZero():
		p.staleSince, p.staleDone = d.At, false
	case !stale:
		p.staleSince = time.Time{}
	}
	fireStale := stale && !p.staleDone && d.At.Sub(p.staleSince) >= p.cfg.StaleAfter
	if fireStale {
		p.staleDone = true
	}
	since := p.staleSince
	p.mu.Unlock()
	if fireStale {
		p.fire(Alert{Key: "stale", Cause: "stale", Signal: d.Binding.String(), StartsAt: since,
			Summary: fmt.Sprintf("stale for %s: %s; all work stopped", d.At.Sub(since).Round(time.Second), d.Reason)})
	}
	if !stale {
		p.resolvePrefix("stale", d.At)
	}
}

// PrimaryChangedFor is how long a primary_changed page stays firing: a
// failover is an event, not a state, so the page resolves by itself.
const PrimaryChangedFor = 10 * time.Minute

// PrimaryChanged pages that the primary throttled samples is another
// server than the one the audit log named last (a failover or a
// switchover; summary says from which server and timeline to which). It
// resolves PrimaryChangedFor later, at the first decision after.
func (p *Pager) PrimaryChanged(at time.Time, summary string) {
	p.fire(Alert{Key: "primary_changed", Cause: "primary_changed", Summary: summary, StartsAt: at})
}

// expirePrimaryChanged resolves a primary_changed page older than
// PrimaryChangedFor.
func (p *Pager) expirePrimaryChanged(now time.Time) {
	p.mu.Lock()
	a, ok := p.active[p.cfg.Cluster+":primary_changed"]
	p.mu.Unlock()
	if ok && now.Sub(a.StartsAt) >= PrimaryChangedFor {
		p.resolveKey("primary_changed", now)
	}
}

// Unhonoured pages for each job whose sessions kept working under a hold
// (jobs), and resolves those no longer in the list.
func (p *Pager) Unhonoured(now time.Time, jobs map[string]string) {
	for job, summary := range jobs {
		p.fire(Alert{Key: "pause_not_honoured:" + job, Cause: "pause_not_honoured", Job: job, Summary: summary, StartsAt: now})
	}
	p.mu.Lock()
	var gone []string
	for key := range p.active {
		if job, ok := strings.CutPrefix(key, p.cfg.Cluster+":pause_not_honoured:"); ok {
			if _, still := jobs[job]; !still {
				gone = append(gone, "pause_not_honoured:"+job)
			}
		}
	}
	p.mu.Unlock()
	for _, key := range gone {
		p.resolveKey(key, now)
	}
}

// resolveKey resolves the one alert with exactly this key.
func (p *Pager) resolveKey(key string, at time.Time) {
	p.mu.Lock()
	full := p.cfg.Cluster + ":" + key
	a, ok := p.active[full]
	if ok {
		a.Firing, a.EndsAt = false, at
		delete(p.active, full)
	}
	p.mu.Unlock()
	if ok {
		p.enqueue(a)
	}
}

// fire sends a new page once; a page already active is not sent again
// (Run resends it to Alertmanager on its own schedule).
func (p *Pager) fire(a Alert) {
	p.mu.Lock()
	a.Cluster, a.Dashboard, a.Firing = p.cfg.Cluster, p.cfg.Dashboard, true
	a.Runbook = RunbookFor(cmp.Or(p.cfg.Runbook, DefaultRunbook), a.Cause)
	a.Key = a.Cluster + ":" + a.Key
	if _, dup := p.active[a.Key]; dup {
		p.mu.Unlock()
		return
	}
	p.active[a.Key] = a
	p.mu.Unlock()
	p.enqueue(a)
}

func (p *Pager) resolvePrefix(prefix string, at time.Time) {
	p.mu.Lock()
	prefix = p.cfg.Cluster + ":" + prefix
	var done []Alert
	for key, a := range p.active {
		if strings.HasPrefix(key, prefix) {
			a.Firing, a.EndsAt = false, at
			done = append(done, a)
			delete(p.active, key)
		}
	}
	p.mu.Unlock()
	for _, a := range done {
		p.enqueue(a)
	}
}

func (p *Pager) enqueue(a Alert) {
	select {
	case p.queue <- a:
	default:
		p.log.Error("page queue full; page dropped", "key", a.Key, "firing", a.Firing)
	}
}

// SetNotifiers replaces the destinations and the dashboard and runbook
// links (a reloaded configuration). The cluster name keys every page, so
// it changes only on restart.
func (p *Pager) SetNotifiers(ns []Notifier, dashboard, runbook string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Notifiers, p.cfg.Dashboard, p.cfg.Runbook = ns, dashboard, runbook
}

func (p *Pager) notifiers() []Notifier {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Notifiers
}

// Active returns the alerts firing now.
func (p *Pager) Active() []Alert {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Alert
	for _, a := range p.active {
		out = append(out, a)
	}
	return out
}

// Run delivers pages until ctx ends: each to every notifier, retried with
// exponential backoff up to MaxAttempts; active alerts are resent every
// Resend.
func (p *Pager) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Resend)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-p.queue:
			p.deliver(ctx, a)
		case <-t.C:
			if p.cfg.Leading != nil && !p.cfg.Leading() {
				p.mu.Lock()
				clear(p.active)
				p.mu.Unlock()
				continue
			}
			// Only Alertmanager forgets an alert that is not resent.
			for _, a := range p.Active() {
				p.deliverTo(ctx, a, func(n Notifier) bool { _, ok := n.(Alertmanager); return ok })
			}
		}
	}
}

func (p *Pager) deliver(ctx context.Context, a Alert) {
	p.deliverTo(ctx, a, func(Notifier) bool { return true })
}

func (p *Pager) deliverTo(ctx context.Context, a Alert, want func(Notifier) bool) {
	for _, n := range p.notifiers() {
		if !want(n) {
			continue
		}
		backoff := 500 * time.Millisecond
		for attempt := 1; ; attempt++ {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := n.Notify(dctx, a)
			cancel()
			if err == nil {
				p.log.Info("page delivered", "key", a.Key, "firing", a.Firing, "notifier", kindOf(n))
				p.count(p.sent, n)
				break
			}
			if attempt >= p.cfg.MaxAttempts || ctx.Err() != nil {
				p.log.Error("page not delivered", "key", a.Key, "firing", a.Firing, "error", err, "attempts", attempt)
				p.count(p.failed, n)
				break
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

func (p *Pager) count(m map[string]int64, n Notifier) {
	p.mu.Lock()
	m[kindOf(n)]++
	p.mu.Unlock()
}

// Counts returns deliveries sent and failed (after every retry), by
// notifier kind: webhook, alertmanager, pagerduty.
func (p *Pager) Counts() (sent, failed map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sent, failed = map[string]int64{}, map[string]int64{}
	for _, k := range Kinds {
		sent[k], failed[k] = p.sent[k], p.failed[k]
	}
	return sent, failed
}

// The notifier kinds, as a configuration names them.
const (
	KindWebhook      = "webhook"
	KindAlertmanager = "alertmanager"
	KindPagerDuty    = "pagerduty"
)

// Kinds lists every notifier kind.
var Kinds = []string{KindWebhook, KindAlertmanager, KindPagerDuty}

// ForKind returns the notifier of kind that pages url; secret is the
// webhook's signing secret or PagerDuty's routing key (Alertmanager takes
// none). An unknown kind is an error that names it.
func ForKind(kind, url, secret string) (Notifier, error) {
	switch kind {
	case KindWebhook:
		return Webhook{URL: url, Secret: secret}, nil
	case KindAlertmanager:
		return Alertmanager{URL: url}, nil
	case KindPagerDuty:
		return PagerDuty{URL: url, RoutingKey: secret}, nil
	}
	return nil, fmt.Errorf("page: notifier kind %q: want one of %s", kind, strings.Join(Kinds, ", "))
}

func kindOf(n Notifier) string {
	switch n.(type) {
	case Webhook:
		return KindWebhook
	case Alertmanager:
		return KindAlertmanager
	case PagerDuty:
		return KindPagerDuty
	}
	return "other"
}

func post(ctx context.Context, url string, body []byte, headers map[string]string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("page: %s: %d: %s", url, resp.StatusCode, bytes.TrimSpace(raw))
	}
	return nil
}

// Webhook posts the alert as JSON, signed: X-Throttled-Timestamp is the
// Unix time and X-Throttled-Signature the hex HMAC-SHA256, under Secret,
// of the timestamp, a dot and the body.
type Webhook struct {
	URL, Secret string
	now         func() time.Time
}

// Sign returns the signature of body at timestamp ts under secret.
func Sign(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Notify implements Notifier.
func (w Webhook) Notify(ctx context.Context, a Alert) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	return post(ctx, w.URL, body, map[string]string{"X-Throttled-Timestamp": ts, "X-Throttled-Signature": Sign(w.Secret, ts, body)})
}

// DefaultRunbook is the runbook pages link when the configuration names
// none: the one shipped with throttled.
const DefaultRunbook = "https://github.com/throttled/throttled/blob/main/docs/RUNBOOK.md"

// RunbookFor is the link to cause's section of the runbook at base: its
// alert name, lower-cased, as the anchor.
func RunbookFor(base, cause string) string {
	return base + "#" + strings.ToLower(alertNames[cause])
}

// alertNames are the Alertmanager alert names, one per cause; the shipped
// alert rules use the same.
var alertNames = map[string]string{
	"critical": "ThrottledCritical", "latched": "ThrottledLatched", "stale": "ThrottledStale",
	"pause_not_honoured": "ThrottledPauseNotHonoured", "exempt_critical": "ThrottledExemptWhileCritical",
	"primary_changed": "ThrottledPrimaryChanged",
}

// Alertmanager posts to Prometheus Alertmanager's API v2 (URL is its
// base, such as http://alertmanager:9093). A resolve carries endsAt.
type Alertmanager struct{ URL string }

// Notify implements Notifier.
func (am Alertmanager) Notify(ctx context.Context, a Alert) error {
	var jobs []string
	for _, j := range a.Jobs {
		jobs = append(jobs, fmt.Sprintf("%s at %.2f/s", j.Job, j.Rate))
	}
	// Alertmanager tells alerts apart by their labels: everything that
	// makes a page distinct (the job, for pause_not_honoured) is one, so
	// resolving one job's page never resolves another's.
	labels := map[string]string{"alertname": alertNames[a.Cause], "cluster": a.Cluster, "cause": a.Cause, "signal": a.Signal, "severity": "page"}
	if a.Job != "" {
		labels["throttled_job"] = a.Job
	}
	alert := map[string]any{
		"labels": labels,
		"annotations": map[string]string{"summary": a.Summary, "jobs": strings.Join(jobs, ", "), "dashboard": a.Dashboard,
			"value": strconv.FormatFloat(a.Value, 'g', 4, 64), "threshold": strconv.FormatFloat(a.Threshold, 'g', 4, 64),
			"runbook_url": a.Runbook},
		"startsAt":     a.StartsAt.UTC().Format(time.RFC3339Nano),
		"generatorURL": a.Dashboard,
	}
	if !a.Firing {
		alert["endsAt"] = a.EndsAt.UTC().Format(time.RFC3339Nano)
	}
	body, _ := json.Marshal([]any{alert})
	return post(ctx, strings.TrimRight(am.URL, "/")+"/api/v2/alerts", body, nil)
}

// PagerDuty posts to the Events API v2 at URL (its enqueue endpoint):
// trigger and resolve under one dedup_key per cluster and cause.
type PagerDuty struct{ URL, RoutingKey string }

// Notify implements Notifier.
func (pd PagerDuty) Notify(ctx context.Context, a Alert) error {
	action := "trigger"
	if !a.Firing {
		action = "resolve"
	}
	ev := map[string]any{"routing_key": pd.RoutingKey, "event_action": action, "dedup_key": a.Key}
	if a.Firing {
		ev["payload"] = map[string]any{"summary": a.Summary, "source": a.Cluster, "severity": "critical", "component": a.Signal,
			"custom_details": map[string]any{"signal": a.Signal, "value": a.Value, "threshold": a.Threshold, "jobs": a.Jobs}}
		links := []map[string]string{{"href": a.Runbook, "text": "runbook"}}
		if a.Dashboard != "" {
			links = append(links, map[string]string{"href": a.Dashboard, "text": "throttled dashboard"})
		}
		ev["links"] = links
	}
	body, _ := json.Marshal(ev)
	return post(ctx, pd.URL, body, nil)
}
