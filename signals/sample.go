package signals

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Name identifies a signal. Names are part of the product's contract.
type Name string

// The signals this package samples.
const (
	PrimaryLoad               Name = "primary_load"
	PrimaryIOWait             Name = "primary_io_wait"
	PrimaryLockWait           Name = "primary_lock_wait"
	PrimaryJobSessions        Name = "primary_job_sessions"
	ForegroundLatency         Name = "foreground_latency"
	ForegroundLatencySeconds  Name = "foreground_latency_seconds"
	ConnectionHeadroom        Name = "connection_headroom"
	ConnectionUsedFraction    Name = "connection_used_fraction"
	ReplicaLagBytes           Name = "replica_lag_bytes"
	ReplicaLagSeconds         Name = "replica_lag_seconds"
	ReplicaReplayBacklogBytes Name = "replica_replay_backlog_bytes"
	ReplicaReplayPaused       Name = "replica_replay_paused"
	// The xmin horizon: how old the oldest snapshot, slot, prepared
	// transaction or standby holding back vacuum is, in transaction IDs
	// and in seconds; xmin_horizon_holder names it by its labels.
	XminHorizonAgeXIDs    Name = "xmin_horizon_age_xids"
	XminHorizonAgeSeconds Name = "xmin_horizon_age_seconds"
	XminHorizonHolder     Name = "xmin_horizon_holder"
	// Replication slots: the WAL each retains (labels slot, type,
	// wal_status), the largest of them, and what is left before
	// max_slot_wal_keep_size invalidates a slot, where it is set.
	SlotRetainedBytes    Name = "slot_retained_bytes"
	SlotRetainedBytesMax Name = "slot_retained_bytes_max"
	SlotSafeWALBytes     Name = "slot_safe_wal_bytes"
	// WraparoundFraction is the oldest database's transaction (or
	// multixact) age over the age at which autovacuum must freeze it.
	WraparoundFraction Name = "wraparound_fraction"
	// WAL and archiving: the rate the primary writes WAL (over windows of
	// at least WALRateWindow), the segments waiting for the archiver, and
	// whether its last attempt failed.
	WALBytesPerSecond      Name = "wal_bytes_per_second"
	ArchivePendingSegments Name = "archive_pending_segments"
	ArchiveFailing         Name = "archive_failing"
	// Vacuums in progress: per table of the primary's database (label
	// table), how many tables have one, and how many autovacuum workers
	// anywhere run to prevent wraparound.
	VacuumRunning         Name = "vacuum_running"
	VacuumRunningTables   Name = "vacuum_running_tables"
	AntiWraparoundVacuums Name = "antiwraparound_vacuums"
	// PgBouncer (opt-in, Config.PgBouncerDSN), per pool (label pool,
	// "database/user"): the clients waiting for a server connection, how
	// long the oldest of them has waited, and the share of the pool's
	// server connections in use; each *_max is the largest over every
	// pool, the one a rule reads (0 with no pool).
	PgBouncerWaitingClients      Name = "pgbouncer_waiting_clients"
	PgBouncerWaitingClientsMax   Name = "pgbouncer_waiting_clients_max"
	PgBouncerMaxWaitSeconds      Name = "pgbouncer_max_wait_seconds"
	PgBouncerMaxWaitSecondsMax   Name = "pgbouncer_max_wait_seconds_max"
	PgBouncerPoolUsedFraction    Name = "pgbouncer_pool_used_fraction"
	PgBouncerPoolUsedFractionMax Name = "pgbouncer_pool_used_fraction_max"
)

// Names lists every signal this package can produce, in display order.
var Names = []Name{
	PrimaryLoad, PrimaryIOWait, PrimaryLockWait, PrimaryJobSessions,
	ForegroundLatency, ForegroundLatencySeconds,
	ConnectionHeadroom, ConnectionUsedFraction,
	ReplicaLagBytes, ReplicaLagSeconds,
	ReplicaReplayBacklogBytes, ReplicaReplayPaused,
	XminHorizonAgeXIDs, XminHorizonAgeSeconds, XminHorizonHolder,
	SlotRetainedBytes, SlotRetainedBytesMax, SlotSafeWALBytes,
	WraparoundFraction,
	WALBytesPerSecond, ArchivePendingSegments, ArchiveFailing,
	VacuumRunning, VacuumRunningTables, AntiWraparoundVacuums,
	PgBouncerWaitingClients, PgBouncerWaitingClientsMax,
	PgBouncerMaxWaitSeconds, PgBouncerMaxWaitSecondsMax,
	PgBouncerPoolUsedFraction, PgBouncerPoolUsedFractionMax,
}

// Known reports whether n is one of [Names].
func Known(n Name) bool { return slices.Contains(Names, n) }

// OptIn reports whether n is sampled only when configured: the
// foreground-latency signals, with Config.ForegroundLatency, and the
// PgBouncer signals, with Config.PgBouncerDSN. Every other signal is
// always sampled (per replica, for the replica signals).
func OptIn(n Name) bool {
	return n == ForegroundLatency || n == ForegroundLatencySeconds || slices.Contains(pgbouncerNames, n)
}

// Conditional reports whether n has samples only while what it describes
// exists: a slot (slot_retained_bytes), a slot bounded by
// max_slot_wal_keep_size (slot_safe_wal_bytes), a holder of the xmin
// horizon (xmin_horizon_holder), a PgBouncer pool (the per-pool
// pgbouncer_* signals). Rules read their always-present summaries
// instead.
func Conditional(n Name) bool {
	return n == SlotRetainedBytes || n == SlotSafeWALBytes || n == XminHorizonHolder || n == VacuumRunning ||
		slices.Contains(pgbouncerPoolNames, n)
}

// Unit is the unit of a sample's value.
type Unit string

// Units of the signals.
const (
	UnitPerCore        Unit = "sessions_per_core"
	UnitSessions       Unit = "sessions"
	UnitConnections    Unit = "connections"
	UnitRatio          Unit = "ratio"
	UnitBytes          Unit = "bytes"
	UnitSeconds        Unit = "seconds"
	UnitBool           Unit = "bool"
	UnitXIDs           Unit = "transaction_ids"
	UnitBytesPerSecond Unit = "bytes_per_second"
	UnitSegments       Unit = "segments"
	UnitVacuums        Unit = "vacuums"
	UnitTables         Unit = "tables"
)

// LabelReplica is the label naming a replica: its physical slot name,
// else its application_name, as the primary sees it.
const LabelReplica = "replica"

// Sample is one reading of one signal.
//
// When Err is non-nil the reading failed and Value and Raw carry nothing
// (they are 0); consumers must treat the signal as unsafe. At is when the
// reading was taken (or attempted, for a failed one); a sample older than
// its max_age is stale and equally unsafe.
type Sample struct {
	Name Name
	// Labels distinguish samples of one signal, such as {"replica":
	// "replica1"}. Nil for signals of the primary as a whole.
	Labels map[string]string
	// Value is the reading, smoothed for the smoothed signals.
	Value float64
	// Raw is the unsmoothed reading; equal to Value for signals that are
	// not smoothed.
	Raw  float64
	Unit Unit
	At   time.Time
	Err  error
	// Baseline, for a ratio over a job-free level (a Prometheus signal
	// with Baseline job-free), is that level in the reading's own unit:
	// the reading is Value times Baseline. 0 otherwise.
	Baseline float64
	// NoForeground says there is no foreground to protect: a Prometheus
	// signal's Traffic read under its MinTraffic. Value and Raw carry
	// nothing; a rule on the signal does not bind (the jobs run as on an
	// idle primary). Err is nil and At is the traffic's time.
	NoForeground bool
}

// Age is how long before now the sample was taken.
func (s Sample) Age(now time.Time) time.Duration { return now.Sub(s.At) }

// Stale reports whether the sample is older than maxAge at now.
func (s Sample) Stale(now time.Time, maxAge time.Duration) bool { return s.Age(now) > maxAge }

// Key is a stable identity for the sample's series: the name, then the
// labels sorted by key, as in `replica_lag_bytes{replica="r1"}`.
func (s Sample) Key() string {
	if len(s.Labels) == 0 {
		return string(s.Name)
	}
	var b strings.Builder
	b.WriteString(string(s.Name))
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + `="` + s.Labels[k] + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

// Snapshot is every latest sample at one instant.
type Snapshot struct {
	// At is when the snapshot was taken.
	At time.Time
	// MaxAge is the age past which a sample is stale.
	MaxAge time.Duration
	// Samples are sorted by signal order ([Names]), then by Key.
	Samples []Sample
}

// Get returns the sample of name whose labels equal labels (nil for a
// signal of the primary as a whole).
func (s Snapshot) Get(name Name, labels map[string]string) (Sample, bool) {
	for _, x := range s.Samples {
		if x.Name == name && maps.Equal(x.Labels, labels) {
			return x, true
		}
	}
	return Sample{}, false
}

// Stale reports whether x is stale at the snapshot's time.
func (s Snapshot) Stale(x Sample) bool { return x.Stale(s.At, s.MaxAge) }

func sortSamples(samples []Sample) {
	order := make(map[Name]int, len(Names))
	for i, n := range Names {
		order[n] = i
	}
	rank := func(n Name) int {
		if i, ok := order[n]; ok {
			return i
		}
		return len(Names) // custom signals follow the built-in ones
	}
	sort.SliceStable(samples, func(i, j int) bool {
		a, b := samples[i], samples[j]
		if rank(a.Name) != rank(b.Name) {
			return rank(a.Name) < rank(b.Name)
		}
		return a.Key() < b.Key()
	})
}

func replicaLabels(name string) map[string]string { return map[string]string{LabelReplica: name} }

// failed returns a sample of name that failed with err at at.
func failed(name Name, labels map[string]string, unit Unit, at time.Time, err error) Sample {
	return Sample{Name: name, Labels: labels, Unit: unit, At: at, Err: err}
}

// Query is one statement the sampler runs each tick, and the signals it
// yields.
type Query struct {
	// Server is "primary", "replica" or "pgbouncer" (its admin console).
	Server  string
	Signals []Name
	SQL     string
}

// Queries lists every statement the sampler runs, in the order it runs
// them (the primary's in one round trip), for the documentation: what
// each signal reads is exactly this.
func Queries() []Query {
	return []Query{
		{"primary", []Name{PrimaryLoad, PrimaryIOWait, PrimaryLockWait, PrimaryJobSessions}, activitySQL},
		{"primary", []Name{ConnectionHeadroom, ConnectionUsedFraction}, headroomSQL},
		{"primary", []Name{ReplicaLagBytes, ReplicaLagSeconds}, replicationSQL},
		{"primary", []Name{XminHorizonAgeXIDs, XminHorizonAgeSeconds, XminHorizonHolder}, horizonSQL},
		{"primary", []Name{SlotRetainedBytes, SlotRetainedBytesMax, SlotSafeWALBytes}, slotsSQL},
		{"primary", []Name{WraparoundFraction}, wraparoundSQL},
		{"primary", []Name{WALBytesPerSecond, ArchivePendingSegments, ArchiveFailing}, walSQL},
		{"primary", []Name{VacuumRunning, VacuumRunningTables, AntiWraparoundVacuums}, vacuumSQL},
		{"primary", []Name{ForegroundLatency, ForegroundLatencySeconds}, canarySQL},
		{"replica", []Name{ReplicaReplayBacklogBytes, ReplicaReplayPaused}, replaySQL},
		{"pgbouncer", pgbouncerNames, pgbouncerPoolsSQL},
		{"pgbouncer", []Name{PgBouncerPoolUsedFraction, PgBouncerPoolUsedFractionMax}, pgbouncerDatabasesSQL},
		{"pgbouncer", []Name{PgBouncerPoolUsedFraction, PgBouncerPoolUsedFractionMax}, pgbouncerUsersSQL},
	}
}
