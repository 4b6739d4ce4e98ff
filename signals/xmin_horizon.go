package signals

import "time"

// horizonSQL finds the oldest thing holding back vacuum's xmin horizon on
// the primary:
//   - a session: its snapshot (backend_xmin) or, idle in transaction after
//     a write under READ COMMITTED, its transaction ID (backend_xid, when
//     it has no snapshot between statements). throttled's own sampler,
//     canary, coordinator and CLI sessions and walsenders (counted as
//     standbys) are left out; the jobs' sessions count;
//   - a replication slot's xmin or catalog_xmin;
//   - a prepared transaction;
//   - a standby's hot_standby_feedback (pg_stat_replication.backend_xmin).
//
// A standby's feedback (its physical slot's xmin, or its backend_xmin)
// echoes the primary's own oldest holder whenever the standby has nothing
// older: a tie of ages names the primary's holder (a session, a prepared
// transaction, a logical slot), the one to act on.
//
// Its age is in transaction IDs (age()) and, where the holder has a start
// time (a transaction, a prepared one), in seconds. It always returns one
// row: 0 and ” when nothing holds the horizon back.
const horizonSQL = `WITH holders(kind, holder, xids, secs, echo) AS (
  SELECT 'session', pid::text || coalesce(':' || nullif(application_name, ''), ''),
         greatest(age(backend_xmin), age(backend_xid))::float8,
         extract(epoch FROM clock_timestamp() - xact_start)::float8, false
    FROM pg_stat_activity
   WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND pid <> pg_backend_pid() AND backend_type <> 'walsender'
     AND coalesce(application_name, '') NOT IN ('` + SamplerAppName + `', '` + CanaryAppName + `', 'throttled-coordinator', 'throttled-cli')
  UNION ALL
  SELECT 'slot', slot_name::text, greatest(age(xmin), age(catalog_xmin))::float8, NULL::float8, slot_type = 'physical'
    FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
  UNION ALL
  SELECT 'prepared', gid, age(transaction)::float8, extract(epoch FROM clock_timestamp() - prepared)::float8, false
    FROM pg_prepared_xacts
  UNION ALL
  SELECT 'standby', coalesce(nullif(application_name, ''), pid::text), age(backend_xmin)::float8, NULL::float8, true
    FROM pg_stat_replication WHERE backend_xmin IS NOT NULL
)
SELECT coalesce(max(xids), 0), coalesce(max(secs), 0),
       coalesce((SELECT kind FROM holders ORDER BY xids DESC NULLS LAST, echo LIMIT 1), ''),
       coalesce((SELECT holder FROM holders ORDER BY xids DESC NULLS LAST, echo LIMIT 1), '')
  FROM holders`

// Labels of xmin_horizon_holder.
const (
	// LabelHolderKind is what holds the horizon: session, slot, prepared
	// or standby.
	LabelHolderKind = "kind"
	// LabelHolder names it: a session's pid (and application_name), a
	// slot's name, a prepared transaction's gid, a standby's name.
	LabelHolder = "holder"
)

// horizon is one row of horizonSQL.
type horizon struct {
	xids, secs   float64
	kind, holder string
}

// samples turns one reading into the horizon signals: its age in
// transaction IDs and in seconds (the oldest holder with a start time;
// slots and standbys have none), and the oldest holder by transaction IDs,
// named by its labels, when anything holds the horizon back.
func (h horizon) samples(at time.Time) []Sample {
	out := []Sample{
		{Name: XminHorizonAgeXIDs, Value: h.xids, Raw: h.xids, Unit: UnitXIDs, At: at},
		{Name: XminHorizonAgeSeconds, Value: h.secs, Raw: h.secs, Unit: UnitSeconds, At: at},
	}
	if h.kind != "" {
		out = append(out, Sample{Name: XminHorizonHolder, Labels: map[string]string{LabelHolderKind: h.kind, LabelHolder: h.holder},
			Value: h.xids, Raw: h.xids, Unit: UnitXIDs, At: at})
	}
	return out
}

func horizonFailed(at time.Time, err error) []Sample {
	return []Sample{
		failed(XminHorizonAgeXIDs, nil, UnitXIDs, at, err),
		failed(XminHorizonAgeSeconds, nil, UnitSeconds, at, err),
	}
}
