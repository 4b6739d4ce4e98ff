package signals

import (
	"fmt"
	"time"
)

// replaySQL reads, on a replica, how much received WAL is not yet
// replayed and whether replay is paused. A replica restored from archive
// without streaming has a NULL receive position. The last column re-checks
// the sampling role's grant, as at connect.
const replaySQL = `SELECT pg_is_in_recovery(),
  pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::float8,
  pg_get_wal_replay_pause_state(), ` + seesSessionsSQL

// replay is one row of replaySQL.
type replay struct {
	inRecovery   bool
	backlog      *float64
	pauseState   string
	seesSessions bool
}

func (r replay) samples(name string, at time.Time) []Sample {
	labels := replicaLabels(name)
	if !r.inRecovery {
		err := fmt.Errorf("%w: replica %q is not in recovery (promoted?)", ErrWrongServer, name)
		return replayFailed(name, at, err)
	}
	paused := 0.0
	if r.pauseState != "not paused" {
		paused = 1
	}
	backlog := Sample{Name: ReplicaReplayBacklogBytes, Labels: labels, Unit: UnitBytes, At: at}
	if r.backlog == nil {
		backlog.Err = fmt.Errorf("signals: replica %q has received no WAL by streaming", name)
	} else {
		backlog.Value = max(*r.backlog, 0)
		backlog.Raw = backlog.Value
	}
	return []Sample{
		backlog,
		{Name: ReplicaReplayPaused, Labels: labels, Value: paused, Raw: paused, Unit: UnitBool, At: at},
	}
}

func replayFailed(name string, at time.Time, err error) []Sample {
	labels := replicaLabels(name)
	return []Sample{
		failed(ReplicaReplayBacklogBytes, labels, UnitBytes, at, err),
		failed(ReplicaReplayPaused, labels, UnitBool, at, err),
	}
}
