package holds

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/throttled/throttled/throttle/hold"
)

// ttl.go: the cluster's rule for a hold's life, throttled.settings: the
// default life of a hold whose request gives none, and the cap on every
// hold's life, which the database enforces.

// Defaults.
const (
	// DefaultTTL is the cluster's default hold life until [Store.SetTTL]
	// changes it (migration 0018 creates it so): throttle's, the one
	// default.
	DefaultTTL = hold.DefaultTTL
	// DefaultMaxTTL is the cluster's cap on a hold's lifetime until
	// [Store.SetTTL] changes it (migration 0006 creates it so, and a
	// test checks the two agree).
	DefaultMaxTTL = hold.DefaultMaxTTL
)

// holdTTL checks r and returns the life its hold gets: the request's,
// else the store's default, else the cluster's
// (throttled.settings.default_hold_ttl), not over the store's own Max.
func (s *Store) holdTTL(ctx context.Context, r hold.Request) (time.Duration, error) {
	ttl, err := s.cfg.check(r)
	if err != nil || ttl > 0 {
		return ttl, err
	}
	p, err := s.ClusterTTL(ctx)
	if err != nil {
		return 0, err
	}
	if s.cfg.TTL.Max > 0 {
		return min(p.Default, s.cfg.TTL.Max), nil
	}
	return p.Default, nil
}

// sqlStateTooLong is the SQLSTATE of the database's refusal of a hold
// that would outlive the cluster's cap (trigger holds_max_ttl, migration
// 0006).
const sqlStateTooLong = "TH001"

// tooLong turns the database's refusal of a hold's expiry into an error
// wrapping [hold.ErrInvalid] that names the TTL asked and the cluster's cap. It
// returns nil when err is not that refusal.
func (s *Store) tooLong(ctx context.Context, err error, ttl time.Duration) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlStateTooLong {
		return nil
	}
	if p, cerr := s.ClusterTTL(ctx); cerr == nil {
		limit := p.Max
		return fmt.Errorf("%w: TTL %s exceeds the maximum %s, the cluster's cap on holds (throttled.settings, from throttled run's holds.max_ttl)",
			hold.ErrInvalid, ttl, limit)
	}
	return fmt.Errorf("%w: TTL %s: %s", hold.ErrInvalid, ttl, pgErr.Message)
}

// selectTTLs reads the cluster's hold policy, in seconds: the default,
// then the cap.
const selectTTLs = `SELECT extract(epoch FROM default_hold_ttl)::float8, extract(epoch FROM max_hold_ttl)::float8
	FROM throttled.settings WHERE id = 1`

// ClusterTTL returns the cluster's hold policy: the default life of a
// hold whose request gives none (throttled.settings.default_hold_ttl)
// and the cap on every hold's life (max_hold_ttl), which the database
// enforces.
func (s *Store) ClusterTTL(ctx context.Context) (hold.TTLPolicy, error) {
	var def, max float64
	if err := s.db.QueryRow(ctx, selectTTLs).Scan(&def, &max); err != nil {
		return hold.TTLPolicy{}, fmt.Errorf("holds: read the cluster's hold TTLs: %w", err)
	}
	return hold.TTLPolicy{Default: seconds(def), Max: seconds(max)}, nil
}

// seconds converts a count of seconds from the database to a Duration,
// to the microsecond PostgreSQL keeps.
func seconds(secs float64) time.Duration {
	return time.Duration(math.Round(secs*1e6)) * time.Microsecond
}

// SetTTL sets the cluster's hold policy (throttled.settings:
// default_hold_ttl and max_hold_ttl; an unset field takes its default,
// see [hold.TTLPolicy.Filled]) and returns the policy it replaced.
// The database enforces the cap on every hold's insert and on every
// renewal that moves an expiry later, whichever client writes it; a
// store's own Config.TTL.Max can only be lower. A hold whose request and
// store give no TTL lives the default. Each change is audited (events
// hold_default_ttl and hold_max_ttl, with actor, source, reason and the
// old and new values); setting the policy it already has writes nothing.
//
// It is the operator's setting: `throttled run` calls it with its
// configuration's holds block at start and on each applied reload, so
// the sidecar's file is the authority. The CLI and the library's Open
// never call it. Any role that may write schema throttled can change it
// (as it can the holds themselves); the audit log says who did.
func (s *Store) SetTTL(ctx context.Context, p hold.TTLPolicy, actor string, source hold.Source, reason string) (hold.TTLPolicy, error) {
	if err := p.Check(); err != nil {
		return hold.TTLPolicy{}, fmt.Errorf("%w: %w", hold.ErrInvalid, err)
	}
	p = p.Filled()
	if err := checkStorable("actor", actor, "source", string(source), "reason", reason); err != nil {
		return hold.TTLPolicy{}, err
	}
	var def, max float64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// The audit trigger reads who and why from these.
		if _, err := tx.Exec(ctx, `SELECT set_config('throttled.actor', $1, true), set_config('throttled.source', $2, true),
			set_config('throttled.reason', $3, true)`, actor, string(source), reason); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, selectTTLs+" FOR UPDATE").Scan(&def, &max); err != nil {
			return err
		}
		// One statement, so the check that the default is not over the
		// cap sees both new values.
		_, err := tx.Exec(ctx, `UPDATE throttled.settings SET default_hold_ttl = make_interval(secs => $1), max_hold_ttl = make_interval(secs => $2)
			WHERE id = 1 AND (default_hold_ttl <> make_interval(secs => $1) OR max_hold_ttl <> make_interval(secs => $2))`, p.Default.Seconds(), p.Max.Seconds())
		return err
	})
	if err != nil {
		return hold.TTLPolicy{}, fmt.Errorf("holds: set the hold TTLs (default %s, max %s): %w", p.Default, p.Max, err)
	}
	return hold.TTLPolicy{Default: seconds(def), Max: seconds(max)}, nil
}
