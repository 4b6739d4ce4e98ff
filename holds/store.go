package holds

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/throttle/hold"
)

// Store creates, releases and lists the cluster's holds (throttled.holds),
// auditing each change in the same transaction, under the cluster's rule
// for a hold's life and this process's own (Config.TTL). Get one from
// [DB.Holds]. It is safe for concurrent use.
type Store struct {
	db  *pgxpool.Pool
	cfg Config
}

// Check reports whether the store would accept r, without a database:
// the checks Add makes before writing.
func (s *Store) Check(r hold.Request) error {
	_, err := s.cfg.check(r)
	return err
}

// unstorable checks name/value pairs with Storable and returns a problem
// naming the field for each value PostgreSQL could not store.
func unstorable(pairs ...string) []string {
	var errs []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := hold.Storable(pairs[i+1]); err != nil {
			errs = append(errs, pairs[i]+": "+err.Error())
		}
	}
	return errs
}

// checkStorable is unstorable as an error wrapping [hold.ErrInvalid], or nil.
func checkStorable(pairs ...string) error {
	if errs := unstorable(pairs...); len(errs) > 0 {
		return fmt.Errorf("%w: %s", hold.ErrInvalid, strings.Join(errs, "; "))
	}
	return nil
}

// Add creates a hold and audits it, in one transaction.
func (s *Store) Add(ctx context.Context, r hold.Request) (hold.Hold, error) {
	ttl, err := s.holdTTL(ctx, r)
	if err != nil {
		return hold.Hold{}, err
	}
	var h hold.Hold
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `INSERT INTO throttled.holds (scope_kind, scope_value, source, reason, actor, expires_at, ratio, exempt)
			VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7, $8)
			RETURNING `+holdColumns, string(r.Scope.Kind), r.Scope.Value, string(r.Source), r.Reason, r.Actor, ttl.Seconds(), r.Ratio, r.Exempt)
		if h, err = scanHold(row); err != nil {
			return err
		}
		return audit(ctx, tx, Entry{Event: EventHoldCreated, Actor: r.Actor, Source: string(r.Source), Reason: r.Reason, HoldID: h.ID,
			Detail: holdDetail(h)})
	})
	if refused := s.tooLong(ctx, err, ttl); refused != nil {
		return hold.Hold{}, refused
	}
	if err != nil {
		return hold.Hold{}, fmt.Errorf("holds: add: %w", err)
	}
	return h, nil
}

// Release ends the active hold id on behalf of actor and source, and
// audits it. Automation (source auto or grafana-alert) may release only
// holds of its own source, never a person's. An actor or reason
// PostgreSQL cannot store is refused with an error wrapping [hold.ErrInvalid].
func (s *Store) Release(ctx context.Context, id, actor string, source hold.Source, reason string) (hold.Hold, error) {
	if err := checkStorable("reason", reason, "actor", actor); err != nil {
		return hold.Hold{}, err
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(id, "h"), 10, 64)
	if err != nil {
		return hold.Hold{}, fmt.Errorf("%w: %q", hold.ErrUnknown, id)
	}
	var h hold.Hold
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `SELECT `+holdColumns+` FROM throttled.holds
			WHERE id = $1 AND released_at IS NULL AND expires_at > now() FOR UPDATE`, n)
		if h, err = scanHold(row); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", hold.ErrUnknown, id)
		} else if err != nil {
			return err
		}
		if automated(source) && h.Source != source {
			return fmt.Errorf("%w: hold %s was made by %s (%s)", ErrPersonsHold, h.ID, h.Actor, h.Source)
		}
		if _, err := tx.Exec(ctx, "UPDATE throttled.holds SET released_at = now(), released_by = $2 WHERE id = $1", n, actor); err != nil {
			return err
		}
		return audit(ctx, tx, Entry{Event: EventHoldReleased, Actor: actor, Source: string(source), Reason: reason, HoldID: h.ID,
			Detail: map[string]any{"scope": h.Scope.String(), "held_by": h.Actor, "held_for": h.Reason}})
	})
	if err != nil {
		return hold.Hold{}, fmt.Errorf("holds: release: %w", err)
	}
	return h, nil
}

// ReleaseScope releases every active hold with exactly this scope (and,
// for source auto, only automatic ones) and returns them.
func (s *Store) ReleaseScope(ctx context.Context, scope hold.Scope, actor string, source hold.Source, reason string) ([]hold.Hold, error) {
	if err := checkStorable("reason", reason, "actor", actor); err != nil {
		return nil, err
	}
	active, err := s.Active(ctx)
	if err != nil {
		return nil, err
	}
	var out []hold.Hold
	for _, h := range active {
		if h.Scope != scope || (automated(source) && h.Source != source) {
			continue
		}
		r, err := s.Release(ctx, h.ID, actor, source, reason)
		if errors.Is(err, hold.ErrUnknown) {
			continue // released or expired meanwhile
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// automated reports whether source is automation (throttled itself, or a
// Grafana alert), which may release only the holds it made itself.
func automated(source hold.Source) bool {
	return source == hold.SourceAuto || source == hold.SourceGrafanaAlert
}

// Active returns the unreleased, unexpired holds, oldest first.
func (s *Store) Active(ctx context.Context) ([]hold.Hold, error) {
	return activeHolds(ctx, s.db)
}

// ExpireDue audits the holds that have expired since the last call (each
// once, whichever process gets there first) and returns them.
func (s *Store) ExpireDue(ctx context.Context) ([]hold.Hold, error) {
	return expireDue(ctx, s.db)
}

const holdColumns = `id, scope_kind, scope_value, source, reason, actor, created_at, expires_at, ratio, exempt`

// holdDetail is what the audit log keeps of a new hold beyond its reason:
// its scope, its end and, for a live override, its ratio, or for an
// exemption, its signal.
func holdDetail(h hold.Hold) map[string]any {
	d := map[string]any{"scope": h.Scope.String(), "expires_at": h.Expires}
	switch {
	case h.Exempt != "":
		d["exempt"] = h.Exempt
	case !h.Pauses():
		d["ratio"] = h.Ratio
	}
	return d
}

func scanHold(row pgx.Row) (hold.Hold, error) {
	var h hold.Hold
	var id int64
	var kind, source string
	if err := row.Scan(&id, &kind, &h.Scope.Value, &source, &h.Reason, &h.Actor, &h.Created, &h.Expires, &h.Ratio, &h.Exempt); err != nil {
		return h, err
	}
	h.ID, h.Scope.Kind, h.Source = "h"+strconv.FormatInt(id, 10), hold.ScopeKind(kind), hold.Source(source)
	return h, nil
}

func activeHolds(ctx context.Context, db *pgxpool.Pool) ([]hold.Hold, error) {
	rows, err := db.Query(ctx, `SELECT `+holdColumns+` FROM throttled.holds
		WHERE released_at IS NULL AND expires_at > now() ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("holds: read: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hold.Hold, error) { return scanHold(r) })
	if err != nil {
		return nil, fmt.Errorf("holds: read: %w", err)
	}
	return out, nil
}

func expireDue(ctx context.Context, db *pgxpool.Pool) ([]hold.Hold, error) {
	var out []hold.Hold
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE throttled.holds SET expiry_audited = true
			WHERE released_at IS NULL AND expires_at <= now() AND NOT expiry_audited
			RETURNING `+holdColumns)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (hold.Hold, error) { return scanHold(r) }); err != nil {
			return err
		}
		for _, h := range out {
			if err := audit(ctx, tx, Entry{Event: EventHoldExpired, Actor: h.Actor, Source: string(h.Source), Reason: h.Reason, HoldID: h.ID,
				Detail: map[string]any{"scope": h.Scope.String(), "expired_at": h.Expires}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("holds: expire: %w", err)
	}
	return out, nil
}
