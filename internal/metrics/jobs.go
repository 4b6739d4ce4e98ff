package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// Job is one job's numbers, as the metrics export them.
type Job struct {
	Name string
	// State is the job's state label: running, throttled or paused (a
	// library job's own may also be done, failed or stopped); "" when
	// unknown, and then the job has no state, rate or why series.
	State string
	// Status is the job's status from its pacer: the why label is
	// status.WhyOf of it.
	Status status.JobStatus
	// Rate is the job's allocated rate, batches per second.
	Rate float64
	// Counters since the process started.
	Batches, Rows, Errors, Retries int64
	BatchSize                      int
	// Remaining is the rows left; negative when unknown.
	Remaining int64
}

// CollectJobs sends the series of jobs: state, rate and why (with the
// why of status.WhyOf, external being the controller's external signals,
// as status.WhyOf takes them) for each job whose state is known, and
// the counters of every one.
func CollectJobs(ch chan<- prometheus.Metric, jobs []Job, external ...signals.Name) {
	for _, j := range jobs {
		if j.State != "" {
			why := status.WhyOf(j.Status, external...)
			ch <- prometheus.MustNewConstMetric(descJobRate, prometheus.GaugeValue, j.Rate, j.Name)
			ch <- prometheus.MustNewConstMetric(descJobPaused, prometheus.GaugeValue, boolf(j.State == string(status.JobPaused)), j.Name)
			ch <- prometheus.MustNewConstMetric(descJobState, prometheus.GaugeValue, 1, j.Name, j.State, string(why))
		}
		ch <- prometheus.MustNewConstMetric(descJobBatches, prometheus.CounterValue, float64(j.Batches), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobRows, prometheus.CounterValue, float64(j.Rows), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobErrors, prometheus.CounterValue, float64(j.Errors), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobRetries, prometheus.CounterValue, float64(j.Retries), j.Name)
		ch <- prometheus.MustNewConstMetric(descJobSize, prometheus.GaugeValue, float64(j.BatchSize), j.Name)
		if j.Remaining >= 0 {
			ch <- prometheus.MustNewConstMetric(descJobLeft, prometheus.GaugeValue, float64(j.Remaining), j.Name)
		}
	}
}

// Extensible is the collector throttled.Client.Collector returns, as the
// sidecar extends it: WithJobs returns the same collector, exporting
// besides the Client's own jobs those jobs lists at each scrape (the
// sidecar's configured jobs, counted from their remote workers' reports),
// their why told with the Client's external signals.
type Extensible interface {
	prometheus.Collector
	WithJobs(jobs func() []Job) prometheus.Collector
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
