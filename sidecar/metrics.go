package sidecar

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// Metric descriptions: names throttled_<subsystem>_<thing>_<unit>, labels
// from bounded sets (signal and replica names, job names from the
// configuration, modes, hold sources). A job's label is throttled_job,
// never job: Prometheus gives every target a job label of its own, and
// would rename ours to exported_job.
var (
	descSignalValue = prometheus.NewDesc("throttled_signals_value", "Latest reading of each signal (smoothed where the signal is).", []string{"signal", "replica"}, nil)
	descSignalAge   = prometheus.NewDesc("throttled_signals_age_seconds", "Age of each signal's latest sample.", []string{"signal", "replica"}, nil)
	descSignalFail  = prometheus.NewDesc("throttled_signals_failed", "1 while a signal's latest sample failed (its value is unknown).", []string{"signal", "replica"}, nil)
	descMode        = prometheus.NewDesc("throttled_controller_mode", "1 for the controller's current mode.", []string{"mode"}, nil)
	descBinding     = prometheus.NewDesc("throttled_controller_binding", "1 for the signal under the most pressure against its target: the one pacing the work.", []string{"signal"}, nil)
	descBudget      = prometheus.NewDesc("throttled_controller_budget_batches_per_second", "Total background budget.", nil, nil)
	descLeader      = prometheus.NewDesc("throttled_controller_leader", "1 while this process leads the cluster.", nil, nil)
	descLatched     = prometheus.NewDesc("throttled_controller_latched", "1 while a critical pause waits for a person to resume.", nil, nil)
	descViolations  = prometheus.NewDesc("throttled_enforce_violations", "Job sessions working under a hold at the last enforcement check.", nil, nil)
	descJobRate     = prometheus.NewDesc("throttled_jobs_rate_batches_per_second", "Each configured job's allocated rate in this process.", []string{"throttled_job"}, nil)
	descJobPaused   = prometheus.NewDesc("throttled_jobs_paused", "1 while a job is paused.", []string{"throttled_job"}, nil)
	descHolds       = prometheus.NewDesc("throttled_holds_active", "Active holds by source.", []string{"source"}, nil)
	descHoldInfo    = prometheus.NewDesc("throttled_holds_info", "1 for each active hold, for annotation regions: its id, scope, source, actor and reason (cut to 80 characters).", []string{"id", "scope", "source", "actor", "reason"}, nil)
	descJobState    = prometheus.NewDesc("throttled_jobs_state", "1 for each job's state, and why in a bounded word: the hold, the binding signal, or no valid allocation.", []string{"throttled_job", "state", "why"}, nil)
	descJobLeft     = prometheus.NewDesc("throttled_jobs_remaining_rows", "Rows a remote worker's job still has to do, as it last reported (absent until it does).", []string{"throttled_job"}, nil)
	descReloads     = prometheus.NewDesc("throttled_config_reloads_total", "Configuration reloads by result (applied or refused).", []string{"result"}, nil)
	descGrants      = prometheus.NewDesc("throttled_api_grants_outstanding", "Tokens granted to remote workers and not yet reported.", nil, nil)
	descPagesSent   = prometheus.NewDesc("throttled_notifications_sent_total", "Pages and resolves delivered, by notifier kind.", []string{"notifier"}, nil)
	descPagesFailed = prometheus.NewDesc("throttled_notifications_failed_total", "Pages and resolves not delivered after every retry, by notifier kind.", []string{"notifier"}, nil)
	descSampleDur   = prometheus.NewDesc("throttled_signals_sample_duration_seconds", "How long the last sampling round of each server took.", []string{"server"}, nil)
	descSamples     = prometheus.NewDesc("throttled_signals_samples_total", "Sampling rounds, by server.", []string{"server"}, nil)
	descSampleFail  = prometheus.NewDesc("throttled_signals_sample_failures_total", "Sampling rounds that failed, by server.", []string{"server"}, nil)
	descJobBatches  = prometheus.NewDesc("throttled_jobs_batches_total", "Batches reported by remote workers, by job.", []string{"throttled_job"}, nil)
	descJobRows     = prometheus.NewDesc("throttled_jobs_rows_total", "Rows reported by remote workers, by job.", []string{"throttled_job"}, nil)
	descJobErrors   = prometheus.NewDesc("throttled_jobs_errors_total", "Failed batches reported by remote workers, by job.", []string{"throttled_job"}, nil)
	descJobRetries  = prometheus.NewDesc("throttled_jobs_retries_total", "Retried batches reported by remote workers, by job.", []string{"throttled_job"}, nil)
	descJobSize     = prometheus.NewDesc("throttled_jobs_batch_size", "Last batch size reported by remote workers, by job.", []string{"throttled_job"}, nil)
	descShed        = prometheus.NewDesc("throttled_api_shed_requests_total", "Requests refused with 503 past the concurrency limit.", nil, nil)
	descAnnotations = prometheus.NewDesc("throttled_annotations_requests_total", "Calls to Grafana's annotations API, by result (ok or failed).", []string{"result"}, nil)
	descBuild       = prometheus.NewDesc("throttled_build_info", "Build information.", []string{"version", "go_version"}, nil)
)

// collector reads the server's state at scrape time: no database query,
// so a scrape never waits on a hung primary.
type collector struct {
	s *Server
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSignalValue, descSignalAge, descSignalFail, descMode, descBudget, descLeader, descLatched, descViolations,
		descJobRate, descJobPaused, descHolds, descReloads, descGrants, descShed, descBuild, descPagesSent, descPagesFailed,
		descSampleDur, descSamples, descSampleFail, descJobBatches, descJobRows, descJobErrors, descJobRetries, descJobSize,
		descHoldInfo, descJobState, descJobLeft, descBinding, descAnnotations} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	leader := s.client.Leader()
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, boolf(leader))
	if leader {
		snap := s.client.Snapshot()
		for _, x := range snap.Samples {
			replica := x.Labels[signals.LabelReplica]
			ch <- prometheus.MustNewConstMetric(descSignalAge, prometheus.GaugeValue, x.Age(snap.At).Seconds(), string(x.Name), replica)
			ch <- prometheus.MustNewConstMetric(descSignalFail, prometheus.GaugeValue, boolf(x.Err != nil), string(x.Name), replica)
			if x.Err == nil {
				ch <- prometheus.MustNewConstMetric(descSignalValue, prometheus.GaugeValue, x.Value, string(x.Name), replica)
			}
		}
		d := s.client.Decision()
		for _, m := range []throttle.Mode{throttle.ModeRunning, throttle.ModeThrottled, throttle.ModePaused, throttle.ModeCritical, throttle.ModeStale} {
			ch <- prometheus.MustNewConstMetric(descMode, prometheus.GaugeValue, boolf(d.Mode == m), string(m))
		}
		ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, d.Budget)
		if d.Binding != "" {
			ch <- prometheus.MustNewConstMetric(descBinding, prometheus.GaugeValue, 1, d.Binding)
		}
		ch <- prometheus.MustNewConstMetric(descLatched, prometheus.GaugeValue, boolf(d.Latched))
		for _, st := range s.client.SamplerStats() {
			ch <- prometheus.MustNewConstMetric(descSampleDur, prometheus.GaugeValue, st.LastDuration.Seconds(), st.Server)
			ch <- prometheus.MustNewConstMetric(descSamples, prometheus.CounterValue, float64(st.Ticks), st.Server)
			ch <- prometheus.MustNewConstMetric(descSampleFail, prometheus.CounterValue, float64(st.Failures), st.Server)
		}
	}
	ch <- prometheus.MustNewConstMetric(descViolations, prometheus.GaugeValue, float64(s.violations.Load()))
	for _, j := range s.config().Jobs {
		if js, ok := s.jobState(j.Name); ok {
			ch <- prometheus.MustNewConstMetric(descJobRate, prometheus.GaugeValue, js.Rate, j.Name)
			ch <- prometheus.MustNewConstMetric(descJobPaused, prometheus.GaugeValue, boolf(js.State == string(throttle.JobPaused)), j.Name)
			ch <- prometheus.MustNewConstMetric(descJobState, prometheus.GaugeValue, 1, j.Name, js.State, why(js))
		}
		r := s.reported(j.Name)
		ch <- prometheus.MustNewConstMetric(descJobBatches, prometheus.CounterValue, float64(r.batches), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobRows, prometheus.CounterValue, float64(r.rows), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobErrors, prometheus.CounterValue, float64(r.errors), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobRetries, prometheus.CounterValue, float64(r.retries), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobSize, prometheus.GaugeValue, float64(r.batchSize), j.Name)
		if r.remaining >= 0 {
			ch <- prometheus.MustNewConstMetric(descJobLeft, prometheus.GaugeValue, float64(r.remaining), j.Name)
		}
	}
	bySource := map[throttle.Source]float64{throttle.SourceManual: 0, throttle.SourceAuto: 0, throttle.SourceGrafanaAlert: 0, throttle.SourceCLI: 0}
	for _, h := range s.client.Watcher().Active() {
		if h.Expires.After(time.Now()) {
			bySource[h.Source]++
			ch <- prometheus.MustNewConstMetric(descHoldInfo, prometheus.GaugeValue, 1, h.ID, h.Scope.String(), string(h.Source), h.Actor, cut(h.Reason, 80))
		}
	}
	for src, n := range bySource {
		ch <- prometheus.MustNewConstMetric(descHolds, prometheus.GaugeValue, n, string(src))
	}
	ch <- prometheus.MustNewConstMetric(descReloads, prometheus.CounterValue, float64(s.reloadsApplied.Load()), "applied")
	ch <- prometheus.MustNewConstMetric(descReloads, prometheus.CounterValue, float64(s.reloadsRefused.Load()), "refused")
	s.gmu.Lock()
	grants := len(s.grants)
	s.gmu.Unlock()
	ch <- prometheus.MustNewConstMetric(descGrants, prometheus.GaugeValue, float64(grants))
	ch <- prometheus.MustNewConstMetric(descShed, prometheus.CounterValue, float64(s.shed.Load()))
	if s.pages != nil {
		sent, failed := s.pages.Counts()
		for kind, n := range sent {
			ch <- prometheus.MustNewConstMetric(descPagesSent, prometheus.CounterValue, float64(n), kind)
			ch <- prometheus.MustNewConstMetric(descPagesFailed, prometheus.CounterValue, float64(failed[kind]), kind)
		}
	}
	if s.annotations != nil {
		ok, failed := s.annotations.Counts()
		ch <- prometheus.MustNewConstMetric(descAnnotations, prometheus.CounterValue, float64(ok), "ok")
		ch <- prometheus.MustNewConstMetric(descAnnotations, prometheus.CounterValue, float64(failed), "failed")
	}
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	ch <- prometheus.MustNewConstMetric(descBuild, prometheus.GaugeValue, 1, version, runtime.Version())
}

// why is a job's reason in a bounded word, fit for a label: the hold
// that pauses it, the signal that binds it, or the want of an allocation.
// The full reason, with its numbers, is in GET /v1/jobs.
func why(js jobJSON) string {
	switch {
	case js.Unavailable:
		return "no valid allocation"
	case strings.HasPrefix(js.Reason, "paused: hold "):
		// "paused: hold <id> on …" or "paused: hold <id>: …"
		id := strings.FieldsFunc(strings.TrimPrefix(js.Reason, "paused: hold "), func(r rune) bool { return r == ' ' || r == ':' })
		if len(id) > 0 {
			return "hold " + id[0]
		}
		return "hold"
	case js.Binding != "":
		return "binding " + js.Binding
	}
	return js.State
}

// cut shortens s to n characters, marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry returns a registry holding the server's metrics and the Go
// runtime's, never the global one.
func (s *Server) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s: s}, s.wait, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return reg
}

// PageCounter reports deliveries sent and failed by notifier kind.
type PageCounter interface {
	Counts() (sent, failed map[string]int64)
}

// SetPager makes the pager's counts part of the metrics.
func (s *Server) SetPager(p PageCounter) { s.pages = p }

// SetAnnotations makes the annotation pusher's counts part of the metrics.
func (s *Server) SetAnnotations(a *Annotations) { s.annotations = a }

// SetViolations records the last enforcement check's violations.
func (s *Server) SetViolations(n int) { s.violations.Store(int64(n)) }

// MetricNames lists the names of every metric the server exports.
func MetricNames() []string {
	ch := make(chan *prometheus.Desc, 64)
	collector{}.Describe(ch)
	newWaitHistogram().Describe(ch)
	close(ch)
	var out []string
	for d := range ch {
		// Desc has no name accessor; its String form carries fqName.
		s := d.String()
		if i := strings.Index(s, `fqName: "`); i >= 0 {
			rest := s[i+len(`fqName: "`):]
			out = append(out, rest[:strings.Index(rest, `"`)])
		}
	}
	return out
}

// ReloadResult counts a reload for the metrics.
func (s *Server) ReloadResult(applied bool) {
	if applied {
		s.reloadsApplied.Add(1)
	} else {
		s.reloadsRefused.Add(1)
	}
}

func (s *Server) metricsHandler() func(http.ResponseWriter, *http.Request, config.Token) {
	h := promhttp.HandlerFor(s.Registry(), promhttp.HandlerOpts{Timeout: 5 * time.Second})
	return func(w http.ResponseWriter, r *http.Request, _ config.Token) { h.ServeHTTP(w, r) }
}

// newWaitHistogram measures how long remote workers wait for a token.
func newWaitHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "throttled_jobs_wait_seconds",
		Help:    "How long an acquire waited for its tokens (or for nothing, when none came), by job.",
		Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
	}, []string{"throttled_job"})
}
