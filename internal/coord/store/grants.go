package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// grants.go: the statements on throttled.grants, the tokens a sidecar has
// handed to remote workers. A row is written before its token's slot is
// taken and ended when the token is reported or expires, so a sidecar
// restarted with tokens out finds them; an ended row is kept a while
// after its expiry, so a late report is told how its token ended. The
// tokens of one sidecar are kept under its owner name, and a sidecar
// claims its name with a session advisory lock (OwnerSession), so a
// second live one with the same name neither serves nor takes up tokens
// under it.

// GrantsTable is the table of remote workers' tokens.
const GrantsTable = "throttled.grants"

// Grant is one token a sidecar handed out.
type Grant struct {
	ID, Job, Owner, Worker string
	// MaxBatch is the job's max_batch_size when it was granted; 0 for
	// none.
	MaxBatch int
	// Expires is when the token expires, by the database's clock, as a
	// duration from the statement that read it.
	Expires time.Duration
}

// GrantEnd is how a token ended, as throttled.grants.ended keeps it.
type GrantEnd string

// The ends of a token.
const (
	GrantOpen     GrantEnd = ""
	GrantReported GrantEnd = "reported"
	GrantExpired  GrantEnd = "expired"
)

// AddGrant records g, owned by g.Owner, expiring ttl from now, and removes
// the tokens whose expiry is more than keep ago (the index grants_expires
// finds them), however they ended.
func (s *Store) AddGrant(ctx context.Context, g Grant, ttl, keep time.Duration) error {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO throttled.grants (id, job, owner, worker, max_batch, expires_at) VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))`,
		g.ID, g.Job, g.Owner, g.Worker, g.MaxBatch, ttl.Seconds())
	b.Queue(`DELETE FROM throttled.grants WHERE expires_at < now() - make_interval(secs => $1)`, keep.Seconds())
	br := s.db.SendBatch(ctx, b)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return on(GrantsTable, err)
		}
	}
	return on(GrantsTable, br.Close())
}

// ErrEndedMeanwhile is EndGrant's when another statement ended the token
// while this one waited for its row: how is not known yet, and nothing
// was stored. Ask again.
var ErrEndedMeanwhile = errors.New("store: the token was ended by another statement meanwhile")

// EndGrant marks token id ended as how (reported or expired) if it is
// still open, in one statement, and returns how the token is ended now:
// how, with ok true, when this statement ended it; the end an earlier
// statement stored, with ok false, when it was ended already; GrantOpen
// and false when no such token is kept.
func (s *Store) EndGrant(ctx context.Context, id string, how GrantEnd) (now GrantEnd, ok bool, err error) {
	// The outer SELECTs see the row as it was when the statement began:
	// its end then, when the UPDATE found it ended already. A row that
	// was open then and that the UPDATE did not end was ended by another
	// transaction the UPDATE waited for.
	var ended *string
	var kept bool
	err = s.db.QueryRow(ctx, `WITH u AS (UPDATE throttled.grants SET ended = $2, ended_at = now() WHERE id = $1 AND ended IS NULL RETURNING ended)
		SELECT EXISTS (SELECT 1 FROM u), EXISTS (SELECT 1 FROM throttled.grants WHERE id = $1),
			coalesce((SELECT ended FROM u), (SELECT ended FROM throttled.grants WHERE id = $1))`, id, string(how)).Scan(&ok, &kept, &ended)
	switch {
	case err != nil:
		return GrantOpen, false, on(GrantsTable, err)
	case !kept:
		return GrantOpen, false, nil
	case ended == nil:
		return GrantOpen, false, on(GrantsTable, ErrEndedMeanwhile)
	}
	return GrantEnd(*ended), ok, nil
}

// OpenGrants returns owner's open tokens of job: those a restarted sidecar
// takes up again. A token past its expiry is ended as expired in the same
// statement, and not returned.
func (s *Store) OpenGrants(ctx context.Context, owner, job string) ([]Grant, error) {
	b := &pgx.Batch{}
	b.Queue(`UPDATE throttled.grants SET ended = 'expired', ended_at = now() WHERE owner = $1 AND job = $2 AND ended IS NULL AND expires_at <= now()`, owner, job)
	b.Queue(`SELECT id, job, owner, worker, max_batch, extract(epoch FROM expires_at - now())::float8
		FROM throttled.grants WHERE owner = $1 AND job = $2 AND ended IS NULL ORDER BY granted_at, id`, owner, job)
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, on(GrantsTable, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, on(GrantsTable, err)
	}
	gs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Grant, error) {
		var g Grant
		var secs float64
		err := r.Scan(&g.ID, &g.Job, &g.Owner, &g.Worker, &g.MaxBatch, &secs)
		g.Expires = time.Duration(secs * float64(time.Second))
		return g, err
	})
	return gs, on(GrantsTable, err)
}

// LookupGrant reads token id: its row and how it ended (GrantOpen while
// out); ok is false when no such token is kept.
func (s *Store) LookupGrant(ctx context.Context, id string) (g Grant, end GrantEnd, ok bool, err error) {
	var ended *string
	var secs float64
	err = s.db.QueryRow(ctx, `SELECT id, job, owner, worker, max_batch, extract(epoch FROM expires_at - now())::float8, ended FROM throttled.grants WHERE id = $1`, id).
		Scan(&g.ID, &g.Job, &g.Owner, &g.Worker, &g.MaxBatch, &secs, &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return Grant{}, GrantOpen, false, nil
	}
	if err != nil {
		return Grant{}, GrantOpen, false, on(GrantsTable, err)
	}
	g.Expires = time.Duration(secs * float64(time.Second))
	if ended != nil {
		end = GrantEnd(*ended)
	}
	return g, end, true, nil
}

// ownerLockKey is the session advisory lock a sidecar holds on its owner
// name: a 64-bit hash of the name, apart from the election's and the
// migrations' keys.
const ownerLockKey = `hashtextextended('throttled.grants owner ' || $1, 0)`

// OwnerFree reports whether no session holds owner's claim now. It takes
// the lock for its own statement's transaction only, so the Store's
// session (a pool's) keeps nothing.
func (s *Store) OwnerFree(ctx context.Context, owner string) (bool, error) {
	var free bool
	err := s.db.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+ownerLockKey+`)`, owner).Scan(&free)
	return free, on(GrantsTable, err)
}

// OwnerSession is a connection of its own that claims a sidecar's owner
// name with a session advisory lock: the claim lasts as long as the
// session does. It is not safe for concurrent use.
type OwnerSession struct {
	conn  *pgx.Conn
	owner string
}

// OpenOwnerSession opens a session on pool's server, with its
// configuration, to claim owner, and has the server end it once idle for
// idle (idle_session_timeout), so a sidecar that stops using it (frozen,
// cut off, dead) loses its claim that long after its last statement. On a
// server without the setting (before PostgreSQL 14) the session is
// returned with the error, which wraps SQLSTATE 42704 (NoIdleTimeout):
// there the claim lasts until the connection ends. Any other failure
// returns no session.
func OpenOwnerSession(ctx context.Context, pool *pgxpool.Pool, owner string, idle time.Duration) (*OwnerSession, error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	o := &OwnerSession{conn: conn, owner: owner}
	if err := New(conn).EndIdleSession(ctx, idle); err != nil {
		if NoIdleTimeout(err) {
			return o, err
		}
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return o, nil
}

// Claim takes the owner's lock for the session if no other session holds
// it, without waiting, and reports whether it did. Ask it only while the
// session does not hold the lock (Ping keeps it): each success takes it
// once more.
func (o *OwnerSession) Claim(ctx context.Context) (bool, error) {
	var got bool
	err := o.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+ownerLockKey+`)`, o.owner).Scan(&got)
	return got, err
}

// Ping runs a statement that reads nothing: it shows that the session,
// and with it the claim, is still there.
func (o *OwnerSession) Ping(ctx context.Context) error { return New(o.conn).Ping(ctx) }

// Closed reports whether the session's connection is closed.
func (o *OwnerSession) Closed() bool { return o.conn.IsClosed() }

// Close gives the claim up and ends the session.
func (o *OwnerSession) Close(ctx context.Context) {
	_, _ = o.conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	_ = o.conn.Close(ctx)
}
