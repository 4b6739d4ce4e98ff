package sidecar

import (
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/metrics"
)

// The sidecar's own metrics; the client's (signals, controller, holds,
// jobs, build) are those of throttled.Client.Collector, under the same
// naming rules.
var (
	descViolations  = prometheus.NewDesc("throttled_enforce_violations", "Job sessions working under a hold at the last enforcement check.", nil, nil)
	descViolByJob   = prometheus.NewDesc("throttled_enforce_violations_by_job", "Each job's sessions working under a hold at the last enforcement check (only jobs that had one).", []string{"throttled_job"}, nil)
	descReloads     = prometheus.NewDesc("throttled_config_reloads_total", "Configuration reloads by result (applied or refused).", []string{"result"}, nil)
	descGrants      = prometheus.NewDesc("throttled_api_grants_outstanding", "Tokens granted to remote workers and not yet reported.", nil, nil)
	descPagesSent   = prometheus.NewDesc("throttled_notifications_sent_total", "Pages and resolves delivered, by notifier kind.", []string{"notifier"}, nil)
	descPagesFailed = prometheus.NewDesc("throttled_notifications_failed_total", "Pages and resolves not delivered after every retry, by notifier kind.", []string{"notifier"}, nil)
	descShed        = prometheus.NewDesc("throttled_api_shed_requests_total", "Requests refused with 503 past their class's concurrency limit, by class (check, person, read, work, report, hook, anon).", []string{"class"}, nil)
	descAnnotations = prometheus.NewDesc("throttled_annotations_requests_total", "Calls to Grafana's annotations API, by result (ok or failed).", []string{"result"}, nil)
)

// collector reads the server's state at scrape time: no database query,
// so a scrape never waits on a hung primary. client is the Client's
// collector, extended with the configured jobs (jobMetrics).
type collector struct {
	s      *Server
	client prometheus.Collector
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	metrics.Describe(ch)
	for _, d := range []*prometheus.Desc{descViolations, descViolByJob, descReloads, descGrants, descShed, descPagesSent, descPagesFailed, descAnnotations} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	c.client.Collect(ch)
	ch <- prometheus.MustNewConstMetric(descViolations, prometheus.GaugeValue, float64(s.violations.Load()))
	s.vmu.Lock()
	for job, n := range s.violByJob {
		ch <- prometheus.MustNewConstMetric(descViolByJob, prometheus.GaugeValue, float64(n), job)
	}
	s.vmu.Unlock()
	ch <- prometheus.MustNewConstMetric(descReloads, prometheus.CounterValue, float64(s.reloadsApplied.Load()), "applied")
	ch <- prometheus.MustNewConstMetric(descReloads, prometheus.CounterValue, float64(s.reloadsRefused.Load()), "refused")
	grants := s.book.out()
	ch <- prometheus.MustNewConstMetric(descGrants, prometheus.GaugeValue, float64(grants))
	for c := classCheck; c < numClasses; c++ {
		ch <- prometheus.MustNewConstMetric(descShed, prometheus.CounterValue, float64(s.shedBy[c].Load()), c.String())
	}
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
}

// jobMetrics are the configured jobs' numbers: their state from the
// controller, their counts from the remote workers' reports.
func (s *Server) jobMetrics() []metrics.Job {
	var js []metrics.Job
	for _, j := range s.config().Jobs {
		r := s.reported(j.Name)
		m := metrics.Job{Name: j.Name, Batches: r.batches, Rows: r.rows, Errors: r.errors, Retries: r.retries,
			BatchSize: r.batchSize, Remaining: r.remaining}
		if st, ok := s.jobState(j.Name); ok {
			m.State, m.Status, m.Rate = st.State, st.status, st.Rate
		}
		js = append(js, m)
	}
	return js
}

// Registry returns a registry holding the server's metrics and the Go
// runtime's, never the global one.
func (s *Server) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	client := s.client.Collector().(metrics.Extensible).WithJobs(s.jobMetrics)
	reg.MustRegister(collector{s: s, client: client}, s.wait, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
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

// SetViolations records the last enforcement check's violations: the
// sessions working under a hold, by job.
func (s *Server) SetViolations(byJob map[string]int) {
	total := 0
	for _, n := range byJob {
		total += n
	}
	s.violations.Store(int64(total))
	s.vmu.Lock()
	s.violByJob = maps.Clone(byJob)
	s.vmu.Unlock()
}

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

// metrics serves /metrics from the server's registry.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ config.Token) {
	s.metricsOnce.Do(func() {
		s.metricsH = promhttp.HandlerFor(s.Registry(), promhttp.HandlerOpts{Timeout: 5 * time.Second})
	})
	s.metricsH.ServeHTTP(w, r)
}

// newWaitHistogram measures how long remote workers wait for a token.
func newWaitHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "throttled_jobs_wait_seconds",
		Help:    "How long an acquire waited for its tokens (or for nothing, when none came), by job.",
		Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
	}, []string{"throttled_job"})
}
