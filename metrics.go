package throttled

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled/internal/metrics"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// labelled are the samples exported under a metric of their own, with
// their labels: every other sample is throttled_signals_* by signal and
// replica.
var labelled = map[signals.Name]struct {
	desc *prometheus.Desc
	keys []string
}{
	signals.SlotRetainedBytes:         {metrics.DescSlotRetained, []string{signals.LabelSlot, signals.LabelSlotType, signals.LabelWALStatus}},
	signals.SlotSafeWALBytes:          {metrics.DescSlotSafe, []string{signals.LabelSlot, signals.LabelSlotType}},
	signals.XminHorizonHolder:         {metrics.DescHolder, []string{signals.LabelHolderKind, signals.LabelHolder}},
	signals.VacuumRunning:             {metrics.DescVacuum, []string{signals.LabelTable}},
	signals.PgBouncerWaitingClients:   {metrics.DescPoolWaiting, []string{signals.LabelPool}},
	signals.PgBouncerMaxWaitSeconds:   {metrics.DescPoolWait, []string{signals.LabelPool}},
	signals.PgBouncerPoolUsedFraction: {metrics.DescPoolUsed, []string{signals.LabelPool}},
}

// byReplicaOnly reports whether a sample's labels are at most a replica's,
// which throttled_signals_* carries; a sample labelled otherwise and not
// in labelled has no metric (it would repeat its series).
func byReplicaOnly(x signals.Sample) bool {
	_, r := x.Labels[signals.LabelReplica]
	return len(x.Labels) == 0 || len(x.Labels) == 1 && r
}

// collect sends the client's metrics (leadership; on the leader the
// signals, mode, budget, binding signal and sampler; the holds; the time
// each job spent at each why; the build), and those of jobs.
func (c *Client) collect(ch chan<- prometheus.Metric, jobs []metrics.Job) {
	leader := c.Leader()
	ch <- prometheus.MustNewConstMetric(metrics.DescLeader, prometheus.GaugeValue, boolf(leader))
	if leader {
		snap := c.Snapshot()
		for _, x := range snap.Samples {
			if l, ok := labelled[x.Name]; ok {
				if x.Err == nil {
					values := make([]string, len(l.keys))
					for i, k := range l.keys {
						values[i] = x.Labels[k]
					}
					ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, x.Value, values...)
				}
				continue
			}
			if !byReplicaOnly(x) {
				continue
			}
			replica := x.Labels[signals.LabelReplica]
			ch <- prometheus.MustNewConstMetric(metrics.DescSignalAge, prometheus.GaugeValue, x.Age(snap.At).Seconds(), string(x.Name), replica)
			ch <- prometheus.MustNewConstMetric(metrics.DescSignalFail, prometheus.GaugeValue, boolf(x.Err != nil), string(x.Name), replica)
			if x.Err == nil {
				ch <- prometheus.MustNewConstMetric(metrics.DescSignalValue, prometheus.GaugeValue, x.Value, string(x.Name), replica)
			}
			if x.Err == nil && x.Baseline > 0 && replica == "" {
				ch <- prometheus.MustNewConstMetric(metrics.DescBaseline, prometheus.GaugeValue, x.Baseline, string(x.Name))
			}
		}
		for _, s := range c.prom {
			baseline := signals.BaselineNone
			if s.JobFree() {
				baseline = signals.BaselineJobFree
			}
			ch <- prometheus.MustNewConstMetric(metrics.DescPromSignal, prometheus.GaugeValue, 1, string(s.Name), string(baseline))
		}
		d := c.Decision()
		for _, m := range []status.Mode{status.ModeRunning, status.ModeThrottled, status.ModePaused, status.ModeCritical, status.ModeStale} {
			ch <- prometheus.MustNewConstMetric(metrics.DescMode, prometheus.GaugeValue, boolf(d.Mode == m), string(m))
		}
		ch <- prometheus.MustNewConstMetric(metrics.DescBudget, prometheus.GaugeValue, d.Budget)
		if !d.Binding.IsZero() {
			ch <- prometheus.MustNewConstMetric(metrics.DescBinding, prometheus.GaugeValue, 1, d.Binding.String())
		}
		ch <- prometheus.MustNewConstMetric(metrics.DescLatched, prometheus.GaugeValue, boolf(d.Latched))
		for _, st := range c.SamplerStats() {
			ch <- prometheus.MustNewConstMetric(metrics.DescSampleDur, prometheus.GaugeValue, st.LastDuration.Seconds(), st.Server)
			ch <- prometheus.MustNewConstMetric(metrics.DescSamples, prometheus.CounterValue, float64(st.Ticks), st.Server)
			ch <- prometheus.MustNewConstMetric(metrics.DescSampleFail, prometheus.CounterValue, float64(st.Failures), st.Server)
		}
	}
	now := time.Now()
	// The durable holds the cluster shares when there are any; else this
	// process's own.
	// Both lists hold only holds that have not ended.
	var hs []hold.Hold
	if c.watcher != nil {
		hs = c.watcher.Active()
	} else {
		hs = c.holds.Active(now)
	}
	bySource := map[hold.Source]float64{hold.SourceManual: 0, hold.SourceAuto: 0, hold.SourceGrafanaAlert: 0, hold.SourceCLI: 0, hold.SourceWindow: 0}
	for _, h := range hs {
		bySource[h.Source]++
		ch <- prometheus.MustNewConstMetric(metrics.DescHoldInfo, prometheus.GaugeValue, 1, h.ID, h.Scope.String(), string(h.Source), h.Actor, cut(h.Reason, 80))
	}
	for src, n := range bySource {
		ch <- prometheus.MustNewConstMetric(metrics.DescHolds, prometheus.GaugeValue, n, string(src))
	}
	metrics.CollectJobs(ch, jobs, c.external...)
	// Every job this process paces, whoever made it (Client.Job, a
	// pacer, the sidecar's configuration).
	now = time.Now()
	for _, j := range c.limited.Jobs() {
		for why, secs := range c.limited.Seconds(now, j) {
			ch <- prometheus.MustNewConstMetric(metrics.DescJobLimited, prometheus.CounterValue, secs, string(j), string(why))
		}
	}
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	ch <- prometheus.MustNewConstMetric(metrics.DescBuild, prometheus.GaugeValue, 1, version, runtime.Version())
}

// Collector exports the client's metrics and those of the jobs made with
// [Client.Job] (the latest job of each name), under the names the sidecar
// uses, so the dashboards show a process that embeds the library:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(client.Collector())
//
// Add a cluster label to its scrape target, as for the sidecar. A job's
// why label is the word of status.WhyOf, as everywhere else.
func (c *Client) Collector() prometheus.Collector { return clientCollector{c: c} }

// clientCollector is the Client's collector; more, when set, lists jobs
// to export besides the Client's own (metrics.Extensible).
type clientCollector struct {
	c    *Client
	more func() []metrics.Job
}

var _ metrics.Extensible = clientCollector{}

func (cc clientCollector) Describe(ch chan<- *prometheus.Desc) { metrics.Describe(ch) }

func (cc clientCollector) Collect(ch chan<- prometheus.Metric) {
	jobs := cc.c.jobMetrics()
	if cc.more != nil {
		jobs = append(jobs, cc.more()...)
	}
	cc.c.collect(ch, jobs)
}

// WithJobs returns the collector, exporting the jobs more lists at each
// scrape besides the Client's own: how the sidecar adds its configured
// jobs (metrics.Extensible).
func (cc clientCollector) WithJobs(more func() []metrics.Job) prometheus.Collector {
	cc.more = more
	return cc
}

// jobRegistry keeps the latest job of each name made with Client.Job.
type jobRegistry struct {
	mu   sync.Mutex
	jobs map[string]*jobs.Job
}

func (r *jobRegistry) add(name string, j *jobs.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs = map[string]*jobs.Job{}
	}
	r.jobs[name] = j
}

func (c *Client) jobMetrics() []metrics.Job {
	c.made.mu.Lock()
	js := make([]*jobs.Job, 0, len(c.made.jobs))
	for _, j := range c.made.jobs {
		js = append(js, j)
	}
	c.made.mu.Unlock()
	out := make([]metrics.Job, 0, len(js))
	for _, j := range js {
		st := j.Status()
		left := int64(-1)
		if st.Total > 0 {
			left = max(0, st.Total-st.Rows)
		}
		out = append(out, metrics.Job{Name: st.Job, State: string(st.State), Status: c.mode.status(status.Job(st.Job)),
			Rate: st.Rate, Batches: st.Batches, Rows: st.Rows, Errors: st.Errors, Retries: st.Retries, BatchSize: st.BatchSize, Remaining: left})
	}
	return out
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
