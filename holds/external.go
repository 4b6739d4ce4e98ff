package holds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/throttle/hold"
)

// ExternalResult says what AddExternal did.
type ExternalResult string

// External results.
const (
	ExternalAdded   ExternalResult = "added"
	ExternalRenewed ExternalResult = "renewed" // a duplicate delivery: the hold's expiry extended
	ExternalIgnored ExternalResult = "ignored" // a firing delivered after its own resolve
)

// AddExternal makes (or renews) the hold an external alert asks for, keyed
// by key (such as a Grafana alert's fingerprint). A duplicate delivery
// renews the existing hold's expiry instead of adding one; a firing that
// started before the last resolve of the same key (delivered out of order)
// adds nothing.
func (s *Store) AddExternal(ctx context.Context, key string, startsAt time.Time, r hold.Request) (hold.Hold, ExternalResult, error) {
	if key == "" {
		return hold.Hold{}, "", fmt.Errorf("%w: an external hold needs a key", hold.ErrInvalid)
	}
	if err := checkStorable("key", key); err != nil {
		return hold.Hold{}, "", err
	}
	ttl, err := s.holdTTL(ctx, r)
	if err != nil {
		return hold.Hold{}, "", err
	}
	var h hold.Hold
	result := ExternalIgnored
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// One delivery at a time per key.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key); err != nil {
			return err
		}
		var endsAt time.Time
		err := tx.QueryRow(ctx, "SELECT ends_at FROM throttled.external_resolved WHERE external_key = $1", key).Scan(&endsAt)
		if err == nil && !startsAt.IsZero() && !startsAt.After(endsAt) {
			return nil // this firing was already resolved
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		row := tx.QueryRow(ctx, `UPDATE throttled.holds SET expires_at = now() + make_interval(secs => $2)
			WHERE external_key = $1 AND released_at IS NULL AND expires_at > now() RETURNING `+holdColumns, key, ttl.Seconds())
		if h, err = scanHold(row); err == nil {
			result = ExternalRenewed
			return nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// An earlier hold of this key that expired while the alert kept
		// firing still holds the key in the one-active-hold-per-key index
		// (expiry does not release): hand the key to the new hold, or the
		// alert could never pause again.
		if _, err := tx.Exec(ctx, `UPDATE throttled.holds SET external_key = NULL
			WHERE external_key = $1 AND released_at IS NULL AND expires_at <= now()`, key); err != nil {
			return err
		}
		row = tx.QueryRow(ctx, `INSERT INTO throttled.holds (scope_kind, scope_value, source, reason, actor, expires_at, external_key)
			VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7) RETURNING `+holdColumns,
			string(r.Scope.Kind), r.Scope.Value, string(r.Source), r.Reason, r.Actor, ttl.Seconds(), key)
		if h, err = scanHold(row); err != nil {
			return err
		}
		result = ExternalAdded
		return audit(ctx, tx, Entry{Event: EventHoldCreated, Actor: r.Actor, Source: string(r.Source), Reason: r.Reason, HoldID: h.ID,
			Detail: map[string]any{"scope": r.Scope.String(), "expires_at": h.Expires, "external_key": key}})
	})
	// A renewal past the cluster's cap is refused like a new hold.
	if refused := s.tooLong(ctx, err, ttl); refused != nil {
		return hold.Hold{}, "", refused
	}
	if err != nil {
		return hold.Hold{}, "", fmt.Errorf("holds: add external: %w", err)
	}
	return h, result, nil
}

// ReleaseExternal releases the active hold keyed by key, if any, and
// remembers the resolve (endsAt) so a late firing of the same alert is
// ignored. It reports whether a hold was released. A key, actor or reason
// PostgreSQL cannot store is refused with an error wrapping [hold.ErrInvalid].
func (s *Store) ReleaseExternal(ctx context.Context, key string, endsAt time.Time, actor string, source hold.Source, reason string) (bool, error) {
	if err := checkStorable("key", key, "actor", actor, "reason", reason); err != nil {
		return false, err
	}
	released := false
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key); err != nil {
			return err
		}
		if endsAt.IsZero() {
			endsAt = time.Now()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO throttled.external_resolved (external_key, ends_at) VALUES ($1, $2)
			ON CONFLICT (external_key) DO UPDATE SET ends_at = GREATEST(throttled.external_resolved.ends_at, $2), resolved_at = now()`,
			key, endsAt); err != nil {
			return err
		}
		row := tx.QueryRow(ctx, `UPDATE throttled.holds SET released_at = now(), released_by = $2
			WHERE external_key = $1 AND released_at IS NULL RETURNING `+holdColumns, key, actor)
		h, err := scanHold(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		released = true
		return audit(ctx, tx, Entry{Event: EventHoldReleased, Actor: actor, Source: string(source), Reason: reason, HoldID: h.ID,
			Detail: map[string]any{"scope": h.Scope.String(), "external_key": key}})
	})
	if err != nil {
		return false, fmt.Errorf("holds: release external: %w", err)
	}
	return released, nil
}
