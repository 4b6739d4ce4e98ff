package signals

import (
	"fmt"
	"slices"
	"time"
)

// replicationSQL lists every walsender joined with every replication slot,
// in both directions: a slot with no walsender is a replica that is gone.
const replicationSQL = `SELECT r.pid, r.application_name, r.state,
  pg_wal_lsn_diff(pg_current_wal_lsn(), r.replay_lsn)::float8,
  EXTRACT(epoch FROM r.replay_lag)::float8,
  s.slot_name::text, s.slot_type, s.temporary
FROM pg_stat_replication r
FULL JOIN pg_replication_slots s ON s.active_pid = r.pid`

// walsenderRow is one row of replicationSQL; nil means SQL NULL.
type walsenderRow struct {
	PID        *int32
	AppName    *string
	State      *string
	LagBytes   *float64
	LagSeconds *float64
	SlotName   *string
	SlotType   *string
	SlotTemp   *bool
}

// notReplicas are application_names of walsenders that stream WAL
// without being replicas.
var notReplicas = []string{"pg_basebackup", "pg_receivewal", "pg_recvlogical"}

// replicaLag is the lag of one replica, or why it cannot be read.
type replicaLag struct {
	name string
	// anonymous: a walsender with neither slot nor application_name,
	// named by its pid. It cannot be told apart from a new one after a
	// reconnect, so it is not remembered as a replica seen earlier: a
	// tool's short replication connection (Patroni checking a timeline)
	// would otherwise be "missing" forever once it hung up.
	anonymous  bool
	bytes      float64
	seconds    float64
	bytesErr   error
	secondsErr error
}

// classifyReplicas turns walsender and slot rows into one replicaLag per
// replica, sorted by name. A replica is a permanent physical slot, or a
// connected physical walsender that is not a base backup or WAL archiver.
// Its name is the slot name, else the application_name. Names in known
// (configured, learnt from a replica DSN, or seen earlier) that have no
// walsender are reported missing, never as zero lag.
func classifyReplicas(rows []walsenderRow, known []string) []replicaLag {
	byName := map[string][]walsenderRow{}
	anonymous := map[string]bool{}
	for _, r := range rows {
		if r.SlotName != nil && (deref(r.SlotType) != "physical" || deref(r.SlotTemp)) {
			continue // logical or temporary slot (pg_basebackup makes one)
		}
		if r.PID != nil && r.SlotName == nil {
			if deref(r.State) == "backup" || slices.Contains(notReplicas, deref(r.AppName)) {
				continue
			}
		}
		name := deref(r.SlotName)
		if name == "" {
			name = deref(r.AppName)
		}
		if name == "" {
			name = fmt.Sprintf("walsender_%d", deref(r.PID))
			anonymous[name] = true
		}
		byName[name] = append(byName[name], r)
	}
	for _, k := range known {
		if _, ok := byName[k]; !ok {
			byName[k] = nil
		}
	}
	var out []replicaLag
	for name, rs := range byName {
		l := lagOf(name, rs)
		l.anonymous = anonymous[name]
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b replicaLag) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return out
}

// caughtUpBytes is the most WAL a replica whose replay_lag is NULL may be
// behind and still read as caught up (0 s): a standby replays that much
// in milliseconds. Past it the lag in seconds is unknown.
const caughtUpBytes = 1 << 20

func lagOf(name string, rs []walsenderRow) replicaLag {
	fail := func(err error) replicaLag {
		return replicaLag{name: name, bytesErr: err, secondsErr: err}
	}
	switch {
	case len(rs) == 0:
		return fail(&ReplicaMissingError{Replica: name, Reason: "no walsender and no slot on the primary"})
	case len(rs) > 1:
		return fail(fmt.Errorf("signals: %d walsenders share the replica name %q; give each replica its own slot or application_name", len(rs), name))
	}
	r := rs[0]
	if r.PID == nil {
		return fail(&ReplicaMissingError{Replica: name, Reason: fmt.Sprintf("slot %q has no walsender connected", name)})
	}
	if r.LagBytes == nil {
		return fail(fmt.Errorf("signals: replica %q (state %s) has not reported a replay position yet", name, deref(r.State)))
	}
	if st := deref(r.State); st != "streaming" {
		// A replica that joins (a rebuilt one, a demoted primary after a
		// failover) is trusted only once it streams: in startup or
		// catchup its lag is no steady reading.
		return fail(fmt.Errorf("signals: replica %q is not streaming yet (state %s)", name, st))
	}
	l := replicaLag{name: name, bytes: max(*r.LagBytes, 0)}
	switch {
	case r.LagSeconds != nil:
		l.seconds = *r.LagSeconds
	case l.bytes <= caughtUpBytes:
		// replay_lag is NULL on an idle, caught-up replica: no lag. The
		// walsender stops measuring once the standby has caught up, so
		// the next commit (the foreground-latency canary makes twenty a
		// second) is a few hundred bytes behind with no lag measured, for
		// the moment before the standby's reply. A replica stopped or
		// paused with WAL to replay reads a growing replay_lag instead.
	default:
		l.secondsErr = fmt.Errorf("signals: replica %q replay_lag is unknown while %.0f bytes behind", name, l.bytes)
	}
	return l
}

func (l replicaLag) samples(at time.Time) []Sample {
	labels := replicaLabels(l.name)
	b := Sample{Name: ReplicaLagBytes, Labels: labels, Value: l.bytes, Raw: l.bytes, Unit: UnitBytes, At: at, Err: l.bytesErr}
	s := Sample{Name: ReplicaLagSeconds, Labels: labels, Value: l.seconds, Raw: l.seconds, Unit: UnitSeconds, At: at, Err: l.secondsErr}
	if b.Err != nil {
		b.Value, b.Raw = 0, 0
	}
	if s.Err != nil {
		s.Value, s.Raw = 0, 0
	}
	return []Sample{b, s}
}

func replicaLagFailed(names []string, at time.Time, err error) []Sample {
	var out []Sample
	for _, n := range names {
		out = append(out, replicaLag{name: n, bytesErr: err, secondsErr: err}.samples(at)...)
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
