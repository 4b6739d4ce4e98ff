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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/throttle/hold"
)

// Channel is the LISTEN/NOTIFY channel every change to a hold is sent on.
const Channel = "throttled_holds"

// Errors.
var (
	// ErrPersonsHold reports an attempt by automation to release a hold a
	// person made.
	ErrPersonsHold = errors.New("holds: automation may not release a person's hold")
)

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

// Config configures a [Store].
type Config struct {
	// TTL is this store's own rule for a hold's life, checked before any
	// query. Its Default, when set, is a hold's life when the request
	// gives none; unset (the CLI's store), the cluster's default applies
	// (throttled.settings.default_hold_ttl, see [Store.SetTTL]). Its Max,
	// when set, can only narrow the cluster's cap
	// (throttled.settings.max_hold_ttl), which the database enforces on
	// every insert and renewal whatever a client asks, so no hold lives
	// forever: a fast, friendly refusal.
	TTL hold.TTLPolicy
}

// Store reads and writes holds and the audit log. It is safe for
// concurrent use.
type Store struct {
	db  *pgxpool.Pool
	cfg Config
}

// NewStore migrates the schema (idempotent) and returns a Store on db.
func NewStore(ctx context.Context, db *pgxpool.Pool, cfg Config) (*Store, error) {
	if err := cfg.TTL.Check(); err != nil {
		return nil, fmt.Errorf("holds: Config.TTL: %w", err)
	}
	if _, err := schema.Migrate(ctx, db); err != nil {
		return nil, err
	}
	return &Store{db: db, cfg: cfg}, nil
}

// ErrSchemaBehind reports a schema throttled that lacks migrations this
// binary needs, found by a store opened to read only.
var ErrSchemaBehind = errors.New("holds: schema throttled is behind this throttled")

// OpenStore returns a Store on a database whose schema throttled is
// current, without migrating: for reading (Active, AuditSince) as a role
// that may not write the schema, such as the sampler's pg_monitor role
// (migration 0014 grants it SELECT). A schema that lacks migrations is an
// error wrapping ErrSchemaBehind that names them.
func OpenStore(ctx context.Context, db *pgxpool.Pool, cfg Config) (*Store, error) {
	pending, err := schema.Pending(ctx, db)
	if err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		var names []string
		for _, m := range pending {
			names = append(names, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
		return nil, fmt.Errorf("%w: it lacks %s; run `throttled migrate` as a role that may write schema throttled", ErrSchemaBehind, strings.Join(names, ", "))
	}
	return &Store{db: db, cfg: cfg}, nil
}

// DB is the coordination database the Store writes to, for the other
// state kept in schema throttled beside the holds.
func (s *Store) DB() *pgxpool.Pool { return s.db }

// storable is s with what [hold.Storable] refuses replaced by U+FFFD.
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Check reports whether the store would accept r, without a database:
// the checks Add makes before writing.
func (s *Store) Check(r hold.Request) error {
	_, err := s.cfg.check(r)
	return err
}

// Check reports whether a store under c would accept r, without a
// database: the cluster's default and cap apply only when the hold is
// written.
func (c Config) Check(r hold.Request) error {
	_, err := c.check(r)
	return err
}

func (c Config) check(r hold.Request) (time.Duration, error) {
	return r.Check(c.TTL)
}

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

// Audit events.
const (
	EventHoldCreated      = "hold_created"
	EventHoldReleased     = "hold_released"
	EventHoldExpired      = "hold_expired"
	EventMode             = "mode"               // a controller event: critical, latched, recovered, stale, ...
	EventPauseNotHonoured = "pause_not_honoured" // a job's session ran on under a hold
	EventReload           = "config_reload"
	EventMaxTTL           = "hold_max_ttl"     // the cluster's cap on holds changed (written by the database's trigger)
	EventDefaultTTL       = "hold_default_ttl" // the cluster's default hold life changed (written by the database's trigger)
	EventPrimaryChanged   = "primary_changed"  // the sampler found another primary, or the first one (see RecordPrimary)
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
	// An audit line is never lost for its text: what PostgreSQL cannot
	// store (a NUL, invalid UTF-8, say in a refused reload's error) is
	// written as U+FFFD.
	e.Event, e.Actor, e.Source, e.Reason = storable(e.Event), storable(e.Actor), storable(e.Source), storable(e.Reason)
	for k, v := range e.Detail {
		if str, ok := v.(string); ok {
			e.Detail[k] = storable(str)
		}
	}
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

// RecordPrimary compares the primary a sampler reached, by its address and
// WAL timeline, with the last one the audit log records, and appends an
// EventPrimaryChanged entry when they differ (or none is recorded yet). It
// returns the entry (its Detail has addr and timeline, and from_addr and
// from_timeline after a change), and changed false when the log already
// named this primary. The
// comparison is in the cluster, under a transaction-scoped advisory lock,
// so a leader elected after a failover, which never saw the old primary
// itself, still tells the change, and two processes never record one
// change twice.
func (s *Store) RecordPrimary(ctx context.Context, addr string, timeline int) (e Entry, changed bool, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var prevAddr string
		var prevTimeline int
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('throttled.primary_changed'))`); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT detail->>'addr', (detail->>'timeline')::int FROM throttled.audit
			WHERE event = $1 ORDER BY id DESC LIMIT 1`, EventPrimaryChanged).Scan(&prevAddr, &prevTimeline)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err == nil && prevAddr == addr && prevTimeline == timeline {
			return nil
		}
		e = Entry{Event: EventPrimaryChanged, Actor: "throttled", Source: string(hold.SourceAuto),
			Detail: map[string]any{"addr": addr, "timeline": timeline}}
		if prevAddr == "" {
			e.Reason = fmt.Sprintf("primary first sampled: %s (timeline %d)", addr, timeline)
		} else {
			e.Reason = fmt.Sprintf("primary changed from %s (timeline %d) to %s (timeline %d)", prevAddr, prevTimeline, addr, timeline)
			e.Detail["from_addr"], e.Detail["from_timeline"] = prevAddr, prevTimeline
		}
		changed = true
		return audit(ctx, tx, e)
	})
	if err != nil {
		return Entry{}, false, fmt.Errorf("holds: record primary: %w", err)
	}
	return e, changed, nil
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
