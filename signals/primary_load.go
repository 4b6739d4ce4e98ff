package signals

import "time"

// JobAppPrefix is the application_name prefix of the sessions of jobs
// throttled paces ("throttled:<job>").
const JobAppPrefix = "throttled:"

// activitySQL counts the primary's active sessions by what they wait on.
// Only client backends and parallel workers count: walsenders, autovacuum
// and background workers are not foreground work, and pg_sleep has a wait
// event (PgSleep), so it is not on CPU. The sampler excludes itself, and
// the foreground-latency canary, whose commit twenty times a second would
// otherwise count as a session on CPU now and then. The
// last column is whether the counts can be trusted: without
// pg_read_all_stats other users' sessions have a NULL state and vanish
// from every count.
const activitySQL = `SELECT
  count(*) FILTER (WHERE state = 'active' AND wait_event IS NULL),
  count(*) FILTER (WHERE state = 'active' AND wait_event_type = 'IO'),
  count(*) FILTER (WHERE state = 'active' AND wait_event_type = 'Lock'),
  count(*) FILTER (WHERE state = 'active' AND starts_with(application_name, '` + JobAppPrefix + `')),
  ` + seesSessionsSQL + `
FROM pg_stat_activity
WHERE backend_type IN ('client backend', 'parallel worker') AND pid <> pg_backend_pid()
  AND application_name IS DISTINCT FROM '` + CanaryAppName + `'`

// activity is one row of activitySQL.
type activity struct {
	onCPU, ioWait, lockWait, jobs int64
	seesSessions                  bool
}

// loadSmoother holds the EWMA state of the smoothed primary signals.
type loadSmoother struct {
	load, io, lock ewma
}

func newLoadSmoother(tau time.Duration) *loadSmoother {
	return &loadSmoother{load: ewma{tau: tau}, io: ewma{tau: tau}, lock: ewma{tau: tau}}
}

// samples turns one activity reading into the primary_load family.
func (a activity) samples(sm *loadSmoother, cores float64, at time.Time) []Sample {
	rawLoad := float64(a.onCPU) / cores
	io, lock := float64(a.ioWait), float64(a.lockWait)
	return []Sample{
		{Name: PrimaryLoad, Value: sm.load.add(rawLoad, at), Raw: rawLoad, Unit: UnitPerCore, At: at},
		{Name: PrimaryIOWait, Value: sm.io.add(io, at), Raw: io, Unit: UnitSessions, At: at},
		{Name: PrimaryLockWait, Value: sm.lock.add(lock, at), Raw: lock, Unit: UnitSessions, At: at},
		{Name: PrimaryJobSessions, Value: float64(a.jobs), Raw: float64(a.jobs), Unit: UnitSessions, At: at},
	}
}

func activityFailed(at time.Time, err error) []Sample {
	return []Sample{
		failed(PrimaryLoad, nil, UnitPerCore, at, err),
		failed(PrimaryIOWait, nil, UnitSessions, at, err),
		failed(PrimaryLockWait, nil, UnitSessions, at, err),
		failed(PrimaryJobSessions, nil, UnitSessions, at, err),
	}
}
