// Package signals reads the health of a PostgreSQL primary and its
// replicas, the inputs of throttled's pacing controller.
//
// Each signal has a stable [Name] (part of the product's contract: the
// config, the HTTP API, the metrics and the dashboards use it) and is read
// by one sampler file. A reading is a [Sample]: a value, a unit, labels,
// the time it was measured and an error. A sample whose Err is set has no
// usable value; a sample older than its max_age is stale. Both are unsafe,
// never "fine": a signal the poller cannot read must slow the jobs down,
// not let them run.
//
// The [Poller] keeps one long-lived connection per server (a sampler that
// reconnects into a full server fails exactly when it is needed), runs
// each query under a server-side statement_timeout and a client deadline,
// and samples each server in its own goroutine, so a hung replica cannot
// stall the primary's samples. At connect, and again on every tick inside
// the tick's own round trip, it checks that its role can see other
// sessions (pg_read_all_stats, part of pg_monitor); without it
// pg_stat_activity hides other users' rows and load would read a silent 0,
// so a grant lost mid-run fails every signal of that server with a
// [GrantError] until it is back.
//
// The signals:
//
//   - primary_load: on-CPU active sessions (client backends and parallel
//     workers with state 'active' and no wait event, the sampler excluded)
//     per configured core, smoothed by an EWMA (time constant 5 s by
//     default); the unsmoothed reading is Sample.Raw.
//   - primary_io_wait, primary_lock_wait: active sessions waiting on IO and
//     on heavyweight locks, smoothed the same way.
//   - primary_job_sessions: active sessions whose application_name starts
//     with "throttled:", the background work throttled paces itself.
//   - foreground_latency, foreground_latency_seconds: with
//     Config.ForegroundLatency (throttled.Open turns it on wherever the
//     canary can run). A canary, a one-row UPDATE on throttled.canary
//     committed with synchronous_commit on, timed every
//     ForegroundLatencyInterval (50 ms) on a connection of its own: what
//     a short foreground transaction waits on, CPU queueing, LWLocks and
//     WAL flush, which primary_load cannot see.
//     foreground_latency_seconds is the latency (Raw this probe's, Value
//     the mean of the last two seconds'); foreground_latency is that mean
//     over the mean of the probes among them that saw no job session at
//     work (Raw; Value an EWMA of it): what the jobs add, 1.0 with no job
//     at work. Unknown ([ErrBaselineWarmup]) until ten job-free probes,
//     and again after a minute (Config.ForegroundLatencyWindow) with
//     jobs at work at nearly every probe. A canary that cannot commit
//     fails both with [ErrCanary]; one that cannot run here at all is
//     also [ErrCanaryUnavailable]. Why a canary and not pg_stat_statements
//     is in foreground_latency.go.
//   - connection_headroom: free client slots, max_connections minus
//     superuser_reserved_connections (and reserved_connections where the
//     server has it) minus client backends, clamped at 0;
//     connection_used_fraction: client backends over the usable slots.
//   - replica_lag_bytes, replica_lag_seconds: per replica (label
//     "replica"), from the primary's pg_stat_replication joined with its
//     physical slots, so a stopped replica is reported missing (an error),
//     never as zero lag.
//   - replica_replay_backlog_bytes, replica_replay_paused: per replica
//     given by DSN, read on the replica itself (WAL received but not yet
//     replayed; whether replay is paused).
//   - xmin_horizon_age_xids, xmin_horizon_age_seconds, xmin_horizon_holder:
//     the oldest thing holding back vacuum (a session, a slot, a prepared
//     transaction, a standby's feedback), throttled's own sessions left out.
//   - slot_retained_bytes (per slot), slot_retained_bytes_max,
//     slot_safe_wal_bytes: the WAL replication slots keep.
//   - wraparound_fraction: the oldest database's age over the age that
//     forces an anti-wraparound vacuum.
//   - wal_bytes_per_second, archive_pending_segments, archive_failing: the
//     WAL rate over windows of at least 2 s, and the archiver's backlog.
//   - vacuum_running (per table), vacuum_running_tables,
//     antiwraparound_vacuums: vacuums in progress.
//   - pgbouncer_*: opt-in (Config.PgBouncerDSN), PgBouncer's pools.
//   - custom signals: opt-in (Config.Custom), the operator's own scalar
//     queries, each in a READ ONLY transaction under its own timeout.
//
// docs/SIGNALS.md shows each signal's statement as the sampler runs it.
package signals
