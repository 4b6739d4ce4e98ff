package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// election.go: the statements of the election. The leader's lock is a
// session advisory lock, so they run on a Store over one connection (a
// *pgx.Conn, the election session), never over a pool, whose statements
// may each land on another session.

// leaderLockKey is the session advisory lock the leader holds ("thrldr").
const leaderLockKey = 0x7468726c6472

// TryLeaderLock takes the leader's advisory lock for the Store's session
// if no session holds it, without waiting, and reports whether it did. The
// session keeps the lock until it ends: closing the connection releases
// it. A session that already holds the lock takes it again (true).
func (s *Store) TryLeaderLock(ctx context.Context) (bool, error) {
	var got bool
	err := s.db.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(leaderLockKey)).Scan(&got)
	return got, err
}

// EndIdleSession has the server end the Store's session once it has been
// idle, outside a transaction, for after (idle_session_timeout): a leader
// that stops using its election session (frozen, partitioned, dead) loses
// it, and with it the lock, that long after its last statement, whatever
// its TCP connection still answers. Servers before PostgreSQL 14 lack the
// setting: the error then wraps SQLSTATE 42704.
func (s *Store) EndIdleSession(ctx context.Context, after time.Duration) error {
	_, err := s.db.Exec(ctx, "SELECT set_config('idle_session_timeout', $1, false)", fmt.Sprintf("%dms", after.Milliseconds()))
	return err
}

// NoIdleTimeout reports whether err is EndIdleSession's on a server that
// lacks idle_session_timeout (before PostgreSQL 14: SQLSTATE 42704), as
// against a failure to reach the server.
func NoIdleTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42704"
}

// Ping runs a statement that reads nothing: on the election session, it
// shows that the session, and with it the lock, is still there.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.db.Exec(ctx, "SELECT 1")
	return err
}

// LeaderQuiet reports whether no leader has published for within: true
// when the last publication is older, or when no leader ever published.
// A deferring candidate seeks the lock only then.
func (s *Store) LeaderQuiet(ctx context.Context, within time.Duration) (bool, error) {
	var quiet bool
	err := s.db.QueryRow(ctx, `SELECT coalesce((SELECT published_at < now() - make_interval(secs => $1) FROM throttled.leader WHERE id = 1), true)`,
		within.Seconds()).Scan(&quiet)
	return quiet, on(LeaderTable, err)
}
