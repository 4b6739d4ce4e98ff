package coord

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/coord/store"
)

// election.go: who leads: the session advisory lock, kept, sought or
// deferred.

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
		// The server ends this session a lease after its last statement:
		// a leader frozen or cut off loses the lock then, and a follower
		// takes over (docs/HOLDS.md gives the bound). The loop runs a
		// statement on it every heartbeat. The setting has its own
		// deadline: a slow connect must not leave it unset.
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		err = store.New(conn).EndIdleSession(sctx, e.lease)
		scancel()
		switch {
		case err == nil:
		case store.NoIdleTimeout(err):
			// PostgreSQL before 14: the session is used without it.
			if !e.idleUnset {
				e.log.Warn("the server cannot end a frozen leader's session (idle_session_timeout, PostgreSQL 14 and later): a leader that freezes keeps the lock until its connection ends", "error", err)
			}
			e.idleUnset = true
		default:
			// A session that could take the setting but did not is not
			// used: it could hold the lock for a frozen leader forever.
			// The next election tries a new one.
			conn.Close(context.WithoutCancel(ctx))
			return
		}
		e.election = conn
	}
	session := store.New(e.election) // the lock is this session's
	if e.leader {
		if err := session.Ping(ectx); err != nil {
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
		quiet, err := session.LeaderQuiet(ectx, e.deferLead)
		if err != nil || !quiet {
			return // a leader published recently, or we cannot tell: let it lead
		}
	}
	got, err := session.TryLeaderLock(ectx)
	if err != nil {
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
