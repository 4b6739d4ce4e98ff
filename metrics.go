package throttled

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// The client's metrics, read at scrape time from memory: a scrape never
// waits on the database. Names are throttled_<subsystem>_<thing>_<unit>;
// labels come from bounded sets (signal and replica names, job names,
// modes, hold sources). A job's label is throttled_job, never job:
// Prometheus gives every target a job label of its own, and would rename
// ours to exported_job. The sidecar exports these and its own; a process
// that embeds the library registers Client.Collector, so the dashboards
// work for either.
var (
	descLeader      = prometheus.NewDesc("throttled_controller_leader", "1 while this process leads the cluster.", nil, nil)
	descSignalValue = prometheus.NewDesc("throttled_signals_value", "Latest reading of each signal (smoothed where the signal is).", []string{"signal", "replica"}, nil)
	descSignalAge   = prometheus.NewDesc("throttled_signals_age_seconds", "Age of each signal's latest sample.", []string{"signal", "replica"}, nil)
	descSignalFail  = prometheus.NewDesc("throttled_signals_failed", "1 while a signal's latest sample failed (its value is unknown).", []string{"signal", "replica"}, nil)
	// The Prometheus signals' own: which signals they are (the dashboards
	// select them by it), and the job-free level a ratio is judged over.
	descPromSignal = prometheus.NewDesc("throttled_signals_prometheus_info", "1 for each Prometheus signal the leader reads, with its baseline (job-free: its value is a ratio over the level while no job works; none: the reading itself).", []string{"signal", "baseline"}, nil)
	descBaseline   = prometheus.NewDesc("throttled_signals_baseline", "The job-free level a ratio signal is judged over, in the reading's own unit, once learnt (a Prometheus signal with baseline job-free): the reading is throttled_signals_value times it.", []string{"signal"}, nil)
	descMode       = prometheus.NewDesc("throttled_controller_mode", "1 for the controller's current mode.", []string{"mode"}, nil)
	descBinding    = prometheus.NewDesc("throttled_controller_binding", "1 for the signal under the most pressure against its target: the one pacing the work.", []string{"signal"}, nil)
	descBudget     = prometheus.NewDesc("throttled_controller_budget_batches_per_second", "Total background budget.", nil, nil)
	descLatched    = prometheus.NewDesc("throttled_controller_latched", "1 while a critical pause waits for a person to resume.", nil, nil)
	descSampleDur  = prometheus.NewDesc("throttled_signals_sample_duration_seconds", "How long the last sampling round of each server took.", []string{"server"}, nil)
	descSamples    = prometheus.NewDesc("throttled_signals_samples_total", "Sampling rounds, by server.", []string{"server"}, nil)
	descSampleFail = prometheus.NewDesc("throttled_signals_sample_failures_total", "Sampling rounds that failed, by server.", []string{"server"}, nil)
	descHolds      = prometheus.NewDesc("throttled_holds_active", "Active holds by source.", []string{"source"}, nil)
	descHoldInfo   = prometheus.NewDesc("throttled_holds_info", "1 for each active hold, for annotation regions: its id, scope, source, actor and reason (cut to 80 characters).", []string{"id", "scope", "source", "actor", "reason"}, nil)
	descJobRate    = prometheus.NewDesc("throttled_jobs_rate_batches_per_second", "Each job's allocated rate in this process.", []string{"throttled_job"}, nil)
	descJobPaused  = prometheus.NewDesc("throttled_jobs_paused", "1 while a job is paused.", []string{"throttled_job"}, nil)
	descJobState   = prometheus.NewDesc("throttled_jobs_state", "1 for each job's state, and why in a bounded word: hold:<source> (manual, auto, grafana-alert, cli, window; the hold's id is in throttled_holds_info), the binding signal, no valid allocation, or the reason code (critical, stale, cut, slow_start, max_rate, ...).", []string{"throttled_job", "state", "why"}, nil)
	descJobBatches = prometheus.NewDesc("throttled_jobs_batches_total", "Batches run, by job.", []string{"throttled_job"}, nil)
	descJobRows    = prometheus.NewDesc("throttled_jobs_rows_total", "Rows processed, by job.", []string{"throttled_job"}, nil)
	descJobErrors  = prometheus.NewDesc("throttled_jobs_errors_total", "Failed batches, by job.", []string{"throttled_job"}, nil)
	descJobRetries = prometheus.NewDesc("throttled_jobs_retries_total", "Retried batches, by job.", []string{"throttled_job"}, nil)
	descJobSize    = prometheus.NewDesc("throttled_jobs_batch_size", "Last batch size, by job.", []string{"throttled_job"}, nil)
	descJobLeft    = prometheus.NewDesc("throttled_jobs_remaining_rows", "Rows a job still has to do (absent while unknown).", []string{"throttled_job"}, nil)
	descJobLimited = prometheus.NewDesc("throttled_jobs_limited_seconds_total", "Seconds each job of this process spent at each limit, by why: full_rate, growth, a rule's signal (foreground_latency, primary_load, ...), batch_errors, slow_start, breach_memory, hold:<source>, critical, stale, gated, ...", []string{"throttled_job", "why"}, nil)
	descBuild      = prometheus.NewDesc("throttled_build_info", "Build information.", []string{"version", "go_version"}, nil)
	// Samples labelled by more than a replica have metrics of their own.
	descSlotRetained = prometheus.NewDesc("throttled_signals_slot_retained_bytes", "WAL each replication slot retains.", []string{"slot", "type", "wal_status"}, nil)
	descSlotSafe     = prometheus.NewDesc("throttled_signals_slot_safe_wal_bytes", "WAL a slot may still retain before max_slot_wal_keep_size invalidates it.", []string{"slot", "type"}, nil)
	descHolder       = prometheus.NewDesc("throttled_signals_xmin_horizon_holder", "The oldest holder of the xmin horizon, by its age in transaction IDs.", []string{"kind", "holder"}, nil)
	descPoolWaiting  = prometheus.NewDesc("throttled_signals_pgbouncer_waiting_clients", "Clients waiting for a server connection, per PgBouncer pool (database/user).", []string{"pool"}, nil)
	descPoolWait     = prometheus.NewDesc("throttled_signals_pgbouncer_max_wait_seconds", "The longest a client of each PgBouncer pool has waited.", []string{"pool"}, nil)
	descPoolUsed     = prometheus.NewDesc("throttled_signals_pgbouncer_pool_used_fraction", "Server connections in use over each PgBouncer pool's size.", []string{"pool"}, nil)
	descVacuum       = prometheus.NewDesc("throttled_signals_vacuum_running", "Vacuums (autovacuum or manual) running on each table of the primary's database that has one.", []string{"table"}, nil)
)

// labelled are the samples exported under a metric of their own, with
// their labels: every other sample is throttled_signals_* by signal and
// replica.
var labelled = map[signals.Name]struct {
	desc *prometheus.Desc
	keys []string
}{
	signals.SlotRetainedBytes:         {descSlotRetained, []string{signals.LabelSlot, signals.LabelSlotType, signals.LabelWALStatus}},
	signals.SlotSafeWALBytes:          {descSlotSafe, []string{signals.LabelSlot, signals.LabelSlotType}},
	signals.XminHorizonHolder:         {descHolder, []string{signals.LabelHolderKind, signals.LabelHolder}},
	signals.VacuumRunning:             {descVacuum, []string{signals.LabelTable}},
	signals.PgBouncerWaitingClients:   {descPoolWaiting, []string{signals.LabelPool}},
	signals.PgBouncerMaxWaitSeconds:   {descPoolWait, []string{signals.LabelPool}},
	signals.PgBouncerPoolUsedFraction: {descPoolUsed, []string{signals.LabelPool}},
}

// byReplicaOnly reports whether a sample's labels are at most a replica's,
// which throttled_signals_* carries; a sample labelled otherwise and not
// in labelled has no metric (it would repeat its series).
func byReplicaOnly(x signals.Sample) bool {
	_, r := x.Labels[signals.LabelReplica]
	return len(x.Labels) == 0 || len(x.Labels) == 1 && r
}

// DescribeMetrics sends every descriptor [Client.CollectMetrics] uses.
func DescribeMetrics(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descSignalValue, descSignalAge, descSignalFail, descPromSignal, descBaseline, descMode, descBinding, descBudget,
		descLatched, descSampleDur, descSamples, descSampleFail, descHolds, descHoldInfo, descJobRate, descJobPaused, descJobState,
		descJobBatches, descJobRows, descJobErrors, descJobRetries, descJobSize, descJobLeft, descJobLimited, descBuild,
		descSlotRetained, descSlotSafe, descHolder, descVacuum, descPoolWaiting, descPoolWait, descPoolUsed} {
		ch <- d
	}
}

// JobMetrics is one job's numbers for the metrics.
type JobMetrics struct {
	Name string
	// State, Why and Rate: the job's state ("" when unknown: no state
	// metrics), a bounded reason (see [Why]) and its allocated rate.
	State, Why string
	Rate       float64
	// Counters since the process started.
	Batches, Rows, Errors, Retries int64
	BatchSize                      int
	// Remaining is the rows left; negative when unknown.
	Remaining int64
}

// Why is a job's reason in a bounded word, fit for a label, derived from
// its status's code: the source of the hold that pauses it (hold:manual,
// hold:window, ...; never its id, which grows without bound over a
// cluster's life and is throttled_holds_info's), the signal that binds it,
// the want of a valid allocation, or the code itself. The full reason,
// with its numbers, stays out of labels.
func Why(st status.JobStatus) string {
	switch {
	case st.Code == status.CodeUnavailable:
		return "no valid allocation"
	case st.Code == status.CodeHeld && len(st.Holds) > 0:
		return string(status.WhyHeld(st.Holds[0].Source))
	case st.Code == status.CodeHeld:
		return "hold"
	case st.Code == status.CodeExempt:
		return "exempt" // past a pause the exemption's signal causes, not bound by it
	case !st.Binding.IsZero() && st.Code.Go():
		return "binding " + st.Binding.String()
	case st.Code == "":
		return string(st.State)
	}
	return string(st.Code)
}

// CollectMetrics sends the client's metrics (leadership; on the leader the
// signals, mode, budget, binding signal and sampler; the holds; the build)
// and those of jobs.
func (c *Client) CollectMetrics(ch chan<- prometheus.Metric, jobs []JobMetrics) {
	leader := c.Leader()
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, boolf(leader))
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
			ch <- prometheus.MustNewConstMetric(descSignalAge, prometheus.GaugeValue, x.Age(snap.At).Seconds(), string(x.Name), replica)
			ch <- prometheus.MustNewConstMetric(descSignalFail, prometheus.GaugeValue, boolf(x.Err != nil), string(x.Name), replica)
			if x.Err == nil {
				ch <- prometheus.MustNewConstMetric(descSignalValue, prometheus.GaugeValue, x.Value, string(x.Name), replica)
			}
			if x.Err == nil && x.Baseline > 0 && replica == "" {
				ch <- prometheus.MustNewConstMetric(descBaseline, prometheus.GaugeValue, x.Baseline, string(x.Name))
			}
		}
		for _, s := range c.prom {
			baseline := signals.BaselineNone
			if s.JobFree() {
				baseline = signals.BaselineJobFree
			}
			ch <- prometheus.MustNewConstMetric(descPromSignal, prometheus.GaugeValue, 1, string(s.Name), string(baseline))
		}
		d := c.Decision()
		for _, m := range []status.Mode{status.ModeRunning, status.ModeThrottled, status.ModePaused, status.ModeCritical, status.ModeStale} {
			ch <- prometheus.MustNewConstMetric(descMode, prometheus.GaugeValue, boolf(d.Mode == m), string(m))
		}
		ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, d.Budget)
		if !d.Binding.IsZero() {
			ch <- prometheus.MustNewConstMetric(descBinding, prometheus.GaugeValue, 1, d.Binding.String())
		}
		ch <- prometheus.MustNewConstMetric(descLatched, prometheus.GaugeValue, boolf(d.Latched))
		for _, st := range c.SamplerStats() {
			ch <- prometheus.MustNewConstMetric(descSampleDur, prometheus.GaugeValue, st.LastDuration.Seconds(), st.Server)
			ch <- prometheus.MustNewConstMetric(descSamples, prometheus.CounterValue, float64(st.Ticks), st.Server)
			ch <- prometheus.MustNewConstMetric(descSampleFail, prometheus.CounterValue, float64(st.Failures), st.Server)
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
		ch <- prometheus.MustNewConstMetric(descHoldInfo, prometheus.GaugeValue, 1, h.ID, h.Scope.String(), string(h.Source), h.Actor, cut(h.Reason, 80))
	}
	for src, n := range bySource {
		ch <- prometheus.MustNewConstMetric(descHolds, prometheus.GaugeValue, n, string(src))
	}
	for _, j := range jobs {
		if j.State != "" {
			ch <- prometheus.MustNewConstMetric(descJobRate, prometheus.GaugeValue, j.Rate, j.Name)
			ch <- prometheus.MustNewConstMetric(descJobPaused, prometheus.GaugeValue, boolf(j.State == string(status.JobPaused)), j.Name)
			ch <- prometheus.MustNewConstMetric(descJobState, prometheus.GaugeValue, 1, j.Name, j.State, j.Why)
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
	// Every job this process paces, whoever made it (Client.Job, a
	// pacer, the sidecar's configuration).
	now = time.Now()
	for _, j := range c.limited.Jobs() {
		for why, secs := range c.limited.Seconds(now, j) {
			ch <- prometheus.MustNewConstMetric(descJobLimited, prometheus.CounterValue, secs, string(j), string(why))
		}
	}
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	ch <- prometheus.MustNewConstMetric(descBuild, prometheus.GaugeValue, 1, version, runtime.Version())
}

// Collector exports the client's metrics and those of the jobs made with
// [Client.Job] (the latest job of each name), under the names the sidecar
// uses, so the dashboards show a process that embeds the library:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(client.Collector())
//
// Add a cluster label to its scrape target, as for the sidecar.
func (c *Client) Collector() prometheus.Collector { return clientCollector{c} }

type clientCollector struct{ c *Client }

func (cc clientCollector) Describe(ch chan<- *prometheus.Desc) { DescribeMetrics(ch) }

func (cc clientCollector) Collect(ch chan<- prometheus.Metric) {
	cc.c.CollectMetrics(ch, cc.c.jobMetrics())
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

func (c *Client) jobMetrics() []JobMetrics {
	c.made.mu.Lock()
	js := make([]*jobs.Job, 0, len(c.made.jobs))
	for _, j := range c.made.jobs {
		js = append(js, j)
	}
	c.made.mu.Unlock()
	out := make([]JobMetrics, 0, len(js))
	for _, j := range js {
		st := j.Status()
		left := int64(-1)
		if st.Total > 0 {
			left = max(0, st.Total-st.Rows)
		}
		out = append(out, JobMetrics{Name: st.Job, State: string(st.State), Why: Why(c.jobStatus(status.Job(st.Job))),
			Rate: st.Rate, Batches: st.Batches, Rows: st.Rows, Errors: st.Errors, Retries: st.Retries, BatchSize: st.BatchSize, Remaining: left})
	}
	return out
}

// jobStatus is job j's status from the pacer this process runs it with.
func (c *Client) jobStatus(j status.Job) status.JobStatus {
	return c.mode.status(j)
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
