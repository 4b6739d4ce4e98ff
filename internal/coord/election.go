package coord

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// election.go: who leads: the session advisory lock, kept, sought or
// deferred.

// leaderLockKey is the session advisory lock the leader holds ("thrldr").
const leaderLockKey = 0x7468726c6472

// elect keeps the lock if it has it, or tries to take it.
func (e *Engine) elect(ctx context.Context) {
	ectx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if e.election == nil || e.election.IsClosed() {
		e.stepDown("lost the election session")
		conn, err := pgx.ConnectConfig(ectx, e.pool.Config().ConnConfig.Copy())
		if err != nil {
			return
		}
		e.election = conn
	}
	if e.leader {
		if _, err := e.election.Exec(ectx, "SELECT 1"); err != nil {
			e.election.Close(context.WithoutCancel(ctx))
			e.election = nil
			e.stepDown("leader session lost: " + err.Error())
			return
		}
		// A deferring leader (it cannot page) yields to a live process
		// that prefers to lead: closing the session releases the lock.
		if e.deferLead > 0 {
			if yes, err := e.db().PreferredAlive(ectx, e.procID, e.lease); err == nil && yes {
				e.election.Close(context.WithoutCancel(ctx))
				e.election = nil
				e.stepDown("a process that pages (a sidecar) is running: it leads")
			}
		}
		return
	}
	if e.deferLead > 0 {
		var quiet bool
		err := e.election.QueryRow(ectx, `SELECT coalesce((SELECT published_at < now() - make_interval(secs => $1) FROM throttled.leader WHERE id = 1), true)`,
			e.deferLead.Seconds()).Scan(&quiet)
		if err != nil || !quiet {
			return // a leader published recently, or we cannot tell: let it lead
		}
	}
	var got bool
	if err := e.election.QueryRow(ectx, "SELECT pg_try_advisory_lock($1)", int64(leaderLockKey)).Scan(&got); err != nil {
		e.election.Close(context.WithoutCancel(ctx))
		e.election = nil
		return
	}
	if got {
		if err := e.becomeLeader(ctx); err != nil {
			e.log.Warn("cannot lead", "error", err)
			e.election.Close(context.WithoutCancel(ctx)) // releases the lock
			e.election = nil
		}
	}
}
