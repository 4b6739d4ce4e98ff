// Package holds makes a pause one durable, checked thing: holds live in
// the database being protected (schema throttled), every change is in an
// append-only audit log, and every process learns of a change within the
// second (LISTEN/NOTIFY, with a poll as the backstop). A process that
// cannot confirm the hold state treats every job as held: fail closed.
//
// [Store] creates, releases and lists holds and reads and writes the
// audit log. [Watcher] keeps a process's view of the holds current and
// satisfies throttle.HoldSource, so the controller pauses exactly the jobs
// a hold applies to.
package holds

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/throttle"
)

// Channel is the LISTEN/NOTIFY channel every change to a hold is sent on.
const Channel = "throttled_holds"

// Errors.
var (
	// ErrUnknownHold reports a hold ID that names no active hold.
	ErrUnknownHold = errors.New("holds: no active hold with that id")
	// ErrInvalid reports a hold request that is refused: a bad scope or
	// source, an empty reason, or a TTL that is negative or over the
	// maximum.
	ErrInvalid = errors.New("holds: invalid hold")
	// ErrPersonsHold reports an attempt by automation to release a hold a
	// person made.
	ErrPersonsHold = errors.New("holds: automation may not release a person's hold")
)

// Config configures a [Store].
type Config struct {
	// DefaultTTL is a hold's lifetime when none is given. Defaults to 1h.
	DefaultTTL time.Duration
	// MaxTTL is the longest lifetime a hold may have; longer is refused.
	// Defaults to 24h. No hold lives forever.
	MaxTTL time.Duration
}

// Store reads and writes holds and the audit log. It is safe for
// concurrent use.
type Store struct {
	db  *pgxpool.Pool
	cfg Config
}

// NewStore migrates the schema (idempotent) and returns a Store on db.
func NewStore(ctx context.Context, db *pgxpool.Pool, cfg Config) (*Store, error) {
	cfg.DefaultTTL = cmp.Or(cfg.DefaultTTL, time.Hour)
	cfg.MaxTTL = cmp.Or(cfg.MaxTTL, 24*time.Hour)
	switch {
	case cfg.DefaultTTL < 0 || cfg.MaxTTL < 0:
		return nil, fmt.Errorf("holds: DefaultTTL %s and MaxTTL %s must not be negative", cfg.DefaultTTL, cfg.MaxTTL)
	case cfg.DefaultTTL > cfg.MaxTTL:
		return nil, fmt.Errorf("holds: DefaultTTL %s must not exceed MaxTTL %s", cfg.DefaultTTL, cfg.MaxTTL)
	}
	if _, err := schema.Migrate(ctx, db); err != nil {
		return nil, err
	}
	return &Store{db: db, cfg: cfg}, nil
}

// Request asks for a hold.
type Request struct {
	Scope  throttle.Scope
	Source throttle.Source
	Reason string
	Actor  string
	// TTL is the hold's lifetime; 0 means the default.
	TTL time.Duration
}

// Storable refuses text PostgreSQL cannot store in a text column: a NUL
// character or invalid UTF-8. JSON carries a NUL as \u0000 and Go
// decodes it into a string, so every input from outside is checked.
func Storable(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL character")
	}
	return nil
}

// Check reports whether the store would accept r, without a database:
// the checks Add makes before writing.
func (s *Store) Check(r Request) error {
	_, err := s.cfg.check(r)
	return err
}

// Check reports whether a store under c would accept r (c's zero TTLs
// meaning their defaults).
func (c Config) Check(r Request) error {
	c.DefaultTTL = cmp.Or(c.DefaultTTL, time.Hour)
	c.MaxTTL = cmp.Or(c.MaxTTL, 24*time.Hour)
	_, err := c.check(r)
	return err
}

func (s *Store) validate(r Request) (time.Duration, error) { return s.cfg.check(r) }

func (c Config) check(r Request) (time.Duration, error) {
	var errs []string
	if err := r.Scope.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	switch r.Source {
	case throttle.SourceManual, throttle.SourceAuto, throttle.SourceGrafanaAlert, throttle.SourceCLI:
	default:
		errs = append(errs, fmt.Sprintf("source %q: want manual, auto, grafana-alert or cli", r.Source))
	}
	if strings.TrimSpace(r.Reason) == "" {
		errs = append(errs, "a reason is required")
	}
	for _, f := range [][2]string{{"reason", r.Reason}, {"actor", r.Actor}, {"scope", r.Scope.Value}} {
		if err := Storable(f[1]); err != nil {
			errs = append(errs, f[0]+": "+err.Error())
		}
	}
	ttl := r.TTL
	switch {
	case ttl < 0:
		errs = append(errs, fmt.Sprintf("TTL %s is negative", ttl))
	case ttl == 0:
		ttl = c.DefaultTTL
	case ttl > c.MaxTTL:
		errs = append(errs, fmt.Sprintf("TTL %s exceeds the maximum %s: no hold lives that long", ttl, c.MaxTTL))
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
	}
	return ttl, nil
}

// Add creates a hold and audits it, in one transaction.
func (s *Store) Add(ctx context.Context, r Request) (throttle.Hold, error) {
	ttl, err := s.validate(r)
	if err != nil {
		return throttle.Hold{}, err
	}
	var h throttle.Hold
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `INSERT INTO throttled.holds (scope_kind, scope_value, source, reason, actor, expires_at)
			VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
			RETURNING `+holdColumns, string(r.Scope.Kind), r.Scope.Value, string(r.Source), r.Reason, r.Actor, ttl.Seconds())
		if h, err = scanHold(row); err != nil {
			return err
		}
		return audit(ctx, tx, Entry{Event: EventHoldCreated, Actor: r.Actor, Source: string(r.Source), Reason: r.Reason, HoldID: h.ID,
			Detail: map[string]any{"scope": r.Scope.String(), "expires_at": h.Expires}})
	})
	if err != nil {
		return throttle.Hold{}, fmt.Errorf("holds: add: %w", err)
	}
	return h, nil
}

// Release ends the active hold id on behalf of actor and source, and
// audits it. Automation (source auto or grafana-alert) may release only
// holds of its own source, never a person's.
func (s *Store) Release(ctx context.Context, id, actor string, source throttle.Source, reason string) (throttle.Hold, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(id, "h"), 10, 64)
	if err != nil {
		return throttle.Hold{}, fmt.Errorf("%w: %q", ErrUnknownHold, id)
	}
	var h throttle.Hold
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `SELECT `+holdColumns+` FROM throttled.holds
			WHERE id = $1 AND released_at IS NULL AND expires_at > now() FOR UPDATE`, n)
		if h, err = scanHold(row); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownHold, id)
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
		return throttle.Hold{}, fmt.Errorf("holds: release: %w", err)
	}
	return h, nil
}

// ReleaseScope releases every active hold with exactly this scope (and,
// for source auto, only automatic ones) and returns them.
func (s *Store) ReleaseScope(ctx context.Context, scope throttle.Scope, actor string, source throttle.Source, reason string) ([]throttle.Hold, error) {
	active, err := s.Active(ctx)
	if err != nil {
		return nil, err
	}
	var out []throttle.Hold
	for _, h := range active {
		if h.Scope != scope || (automated(source) && h.Source != source) {
			continue
		}
		r, err := s.Release(ctx, h.ID, actor, source, reason)
		if errors.Is(err, ErrUnknownHold) {
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
func automated(source throttle.Source) bool {
	return source == throttle.SourceAuto || source == throttle.SourceGrafanaAlert
}

// Active returns the unreleased, unexpired holds, oldest first.
func (s *Store) Active(ctx context.Context) ([]throttle.Hold, error) {
	return activeHolds(ctx, s.db)
}

// ExpireDue audits the holds that have expired since the last call (each
// once, whichever process gets there first) and returns them.
func (s *Store) ExpireDue(ctx context.Context) ([]throttle.Hold, error) {
	return expireDue(ctx, s.db)
}

const holdColumns = `id, scope_kind, scope_value, source, reason, actor, created_at, expires_at`

func scanHold(row pgx.Row) (throttle.Hold, error) {
	var h throttle.Hold
	var id int64
	var kind, source string
	if err := row.Scan(&id, &kind, &h.Scope.Value, &source, &h.Reason, &h.Actor, &h.Created, &h.Expires); err != nil {
		return h, err
	}
	h.ID, h.Scope.Kind, h.Source = "h"+strconv.FormatInt(id, 10), throttle.ScopeKind(kind), throttle.Source(source)
	return h, nil
}

func activeHolds(ctx context.Context, db *pgxpool.Pool) ([]throttle.Hold, error) {
	rows, err := db.Query(ctx, `SELECT `+holdColumns+` FROM throttled.holds
		WHERE released_at IS NULL AND expires_at > now() ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("holds: read: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (throttle.Hold, error) { return scanHold(r) })
	if err != nil {
		return nil, fmt.Errorf("holds: read: %w", err)
	}
	return out, nil
}

func expireDue(ctx context.Context, db *pgxpool.Pool) ([]throttle.Hold, error) {
	var out []throttle.Hold
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE throttled.holds SET expiry_audited = true
			WHERE released_at IS NULL AND expires_at <= now() AND NOT expiry_audited
			RETURNING `+holdColumns)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (throttle.Hold, error) { return scanHold(r) }); err != nil {
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

// Audit events.
const (
	EventHoldCreated      = "hold_created"
	EventHoldReleased     = "hold_released"
	EventHoldExpired      = "hold_expired"
	EventMode             = "mode"               // a controller event: critical, latched, recovered, stale, ...
	EventPauseNotHonoured = "pause_not_honoured" // a job's session ran on under a hold
	EventReload           = "config_reload"
)

// Entry is one line of the audit log.
type Entry struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Event  string         `json:"event"`
	Actor  string         `json:"actor"`
	Source string         `json:"source"`
	Reason string         `json:"reason"`
	HoldID string         `json:"hold_id,omitempty"`
	Detail map[string]any `json:"detail,omitempty"`
}

// Audit appends e to the audit log.
func (s *Store) Audit(ctx context.Context, e Entry) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return audit(ctx, tx, e) })
}

func audit(ctx context.Context, tx pgx.Tx, e Entry) error {
	var holdID *int64
	if e.HoldID != "" {
		if n, err := strconv.ParseInt(strings.TrimPrefix(e.HoldID, "h"), 10, 64); err == nil {
			holdID = &n
		}
	}
	if e.Detail == nil {
		e.Detail = map[string]any{}
	}
	detail, err := json.Marshal(e.Detail)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO throttled.audit (event, actor, source, reason, hold_id, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
		e.Event, e.Actor, e.Source, e.Reason, holdID, detail)
	return err
}

// AuditSince returns the audit log from since on, oldest first.
func (s *Store) AuditSince(ctx context.Context, since time.Time) ([]Entry, error) {
	rows, err := s.db.Query(ctx, `SELECT id, at, event, actor, source, reason, hold_id, detail FROM throttled.audit
		WHERE at >= $1 ORDER BY id`, since)
	if err != nil {
		return nil, fmt.Errorf("holds: audit: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var holdID *int64
		err := r.Scan(&e.ID, &e.At, &e.Event, &e.Actor, &e.Source, &e.Reason, &holdID, &e.Detail)
		if holdID != nil {
			e.HoldID = "h" + strconv.FormatInt(*holdID, 10)
		}
		return e, err
	})
}
