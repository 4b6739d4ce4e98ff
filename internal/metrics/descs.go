package metrics

import "github.com/prometheus/client_golang/prometheus"

// The client's metrics, read at scrape time from memory: a scrape never
// waits on the database. Names are throttled_<subsystem>_<thing>_<unit>;
// labels come from bounded sets (signal and replica names, job names,
// modes, hold sources). A job's label is throttled_job, never job:
// Prometheus gives every target a job label of its own, and would rename
// ours to exported_job. The sidecar exports these and its own; a process
// that embeds the library registers Client.Collector, so the dashboards
// work for either.
var (
	DescLeader      = prometheus.NewDesc("throttled_controller_leader", "1 while this process leads the cluster.", nil, nil)
	DescSignalValue = prometheus.NewDesc("throttled_signals_value", "Latest reading of each signal (smoothed where the signal is).", []string{"signal", "replica"}, nil)
	DescSignalAge   = prometheus.NewDesc("throttled_signals_age_seconds", "Age of each signal's latest sample.", []string{"signal", "replica"}, nil)
	DescSignalFail  = prometheus.NewDesc("throttled_signals_failed", "1 while a signal's latest sample failed (its value is unknown).", []string{"signal", "replica"}, nil)
	// The Prometheus signals' own: which signals they are (the dashboards
	// select them by it), and the job-free level a ratio is judged over.
	DescPromSignal = prometheus.NewDesc("throttled_signals_prometheus_info", "1 for each Prometheus signal the leader reads, with its baseline (job-free: its value is a ratio over the level while no job works; none: the reading itself).", []string{"signal", "baseline"}, nil)
	DescBaseline   = prometheus.NewDesc("throttled_signals_baseline", "The job-free level a ratio signal is judged over, in the reading's own unit, once learnt (a Prometheus signal with baseline job-free): the reading is throttled_signals_value times it.", []string{"signal"}, nil)
	DescMode       = prometheus.NewDesc("throttled_controller_mode", "1 for the controller's current mode.", []string{"mode"}, nil)
	DescBinding    = prometheus.NewDesc("throttled_controller_binding", "1 for the signal under the most pressure against its target: the one pacing the work.", []string{"signal"}, nil)
	DescBudget     = prometheus.NewDesc("throttled_controller_budget_batches_per_second", "Total background budget.", nil, nil)
	DescLatched    = prometheus.NewDesc("throttled_controller_latched", "1 while a critical pause waits for a person to resume.", nil, nil)
	DescSampleDur  = prometheus.NewDesc("throttled_signals_sample_duration_seconds", "How long the last sampling round of each server took.", []string{"server"}, nil)
	DescSamples    = prometheus.NewDesc("throttled_signals_samples_total", "Sampling rounds, by server.", []string{"server"}, nil)
	DescSampleFail = prometheus.NewDesc("throttled_signals_sample_failures_total", "Sampling rounds that failed, by server.", []string{"server"}, nil)
	DescHolds      = prometheus.NewDesc("throttled_holds_active", "Active holds by source.", []string{"source"}, nil)
	DescHoldInfo   = prometheus.NewDesc("throttled_holds_info", "1 for each active hold, for annotation regions: its id, scope, source, actor and reason (cut to 80 characters).", []string{"id", "scope", "source", "actor", "reason"}, nil)
	descJobRate    = prometheus.NewDesc("throttled_jobs_rate_batches_per_second", "Each job's allocated rate in this process.", []string{"throttled_job"}, nil)
	descJobPaused  = prometheus.NewDesc("throttled_jobs_paused", "1 while a job is paused.", []string{"throttled_job"}, nil)
	descJobState   = prometheus.NewDesc("throttled_jobs_state", "1 for each job's state, and why in a bounded word (the words of throttled_jobs_limited_seconds_total): hold:<source> (manual, auto, grafana-alert, cli, window; the hold's id is in throttled_holds_info), the binding signal (foreground_latency, primary_load, ...), batch_errors, full_rate, growth, slow_start, breach_memory, critical, stale, gated, unavailable, ...", []string{"throttled_job", "state", "why"}, nil)
	descJobBatches = prometheus.NewDesc("throttled_jobs_batches_total", "Batches run, by job.", []string{"throttled_job"}, nil)
	descJobRows    = prometheus.NewDesc("throttled_jobs_rows_total", "Rows processed, by job.", []string{"throttled_job"}, nil)
	descJobErrors  = prometheus.NewDesc("throttled_jobs_errors_total", "Failed batches, by job.", []string{"throttled_job"}, nil)
	descJobRetries = prometheus.NewDesc("throttled_jobs_retries_total", "Retried batches, by job.", []string{"throttled_job"}, nil)
	descJobSize    = prometheus.NewDesc("throttled_jobs_batch_size", "Last batch size, by job.", []string{"throttled_job"}, nil)
	descJobLeft    = prometheus.NewDesc("throttled_jobs_remaining_rows", "Rows a job still has to do (absent while unknown).", []string{"throttled_job"}, nil)
	DescJobLimited = prometheus.NewDesc("throttled_jobs_limited_seconds_total", "Seconds each job of this process spent at each limit, by why: full_rate, growth, a rule's signal (foreground_latency, primary_load, ...), batch_errors, slow_start, breach_memory, hold:<source>, critical, stale, gated, ...", []string{"throttled_job", "why"}, nil)
	DescBuild      = prometheus.NewDesc("throttled_build_info", "Build information.", []string{"version", "go_version"}, nil)
	// Samples labelled by more than a replica have metrics of their own.
	DescSlotRetained = prometheus.NewDesc("throttled_signals_slot_retained_bytes", "WAL each replication slot retains.", []string{"slot", "type", "wal_status"}, nil)
	DescSlotSafe     = prometheus.NewDesc("throttled_signals_slot_safe_wal_bytes", "WAL a slot may still retain before max_slot_wal_keep_size invalidates it.", []string{"slot", "type"}, nil)
	DescHolder       = prometheus.NewDesc("throttled_signals_xmin_horizon_holder", "The oldest holder of the xmin horizon, by its age in transaction IDs.", []string{"kind", "holder"}, nil)
	DescPoolWaiting  = prometheus.NewDesc("throttled_signals_pgbouncer_waiting_clients", "Clients waiting for a server connection, per PgBouncer pool (database/user).", []string{"pool"}, nil)
	DescPoolWait     = prometheus.NewDesc("throttled_signals_pgbouncer_max_wait_seconds", "The longest a client of each PgBouncer pool has waited.", []string{"pool"}, nil)
	DescPoolUsed     = prometheus.NewDesc("throttled_signals_pgbouncer_pool_used_fraction", "Server connections in use over each PgBouncer pool's size.", []string{"pool"}, nil)
	DescVacuum       = prometheus.NewDesc("throttled_signals_vacuum_running", "Vacuums (autovacuum or manual) running on each table of the primary's database that has one.", []string{"table"}, nil)
)

// Describe sends every descriptor of the client's metrics: those
// throttled.Client.Collector exports, which the sidecar exports too.
func Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{DescLeader, DescSignalValue, DescSignalAge, DescSignalFail, DescPromSignal, DescBaseline, DescMode, DescBinding, DescBudget,
		DescLatched, DescSampleDur, DescSamples, DescSampleFail, DescHolds, DescHoldInfo, descJobRate, descJobPaused, descJobState,
		descJobBatches, descJobRows, descJobErrors, descJobRetries, descJobSize, descJobLeft, DescJobLimited, DescBuild,
		DescSlotRetained, DescSlotSafe, DescHolder, DescVacuum, DescPoolWaiting, DescPoolWait, DescPoolUsed} {
		ch <- d
	}
}
