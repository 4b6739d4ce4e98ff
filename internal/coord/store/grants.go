package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// grants.go: the statements on throttled.grants, the tokens a sidecar has
// handed to remote workers. A row is written before its token's slot is
// taken and ended when the token is reported or expires, so a sidecar
// restarted with tokens out finds them.

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
// tokens ended or expired longer than ttl ago.
func (s *Store) AddGrant(ctx context.Context, g Grant, ttl time.Duration) error {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO throttled.grants (id, job, owner, worker, max_batch, expires_at) VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))`,
		g.ID, g.Job, g.Owner, g.Worker, g.MaxBatch, ttl.Seconds())
	b.Queue(`DELETE FROM throttled.grants WHERE expires_at < now() - make_interval(secs => $1)`, ttl.Seconds())
	br := s.db.SendBatch(ctx, b)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return on(GrantsTable, err)
		}
	}
	return on(GrantsTable, br.Close())
}

// EndGrant marks token id ended (reported or expired), if it is still
// open; false when it was not.
func (s *Store) EndGrant(ctx context.Context, id string, how GrantEnd) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE throttled.grants SET ended = $2, ended_at = now() WHERE id = $1 AND ended IS NULL`, id, string(how))
	if err != nil {
		return false, on(GrantsTable, err)
	}
	return tag.RowsAffected() == 1, nil
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
