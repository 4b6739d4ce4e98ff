package holds

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
	EventPrimaryChanged   = "primary_changed"  // the sampler found another primary, or the first one (see AuditLog.RecordPrimary)
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

// AuditLog is the append-only audit log, throttled.audit: every change
// to a hold, and what the controller, the enforcer and reloads report.
// Get one from [DB.Audit]. It is safe for concurrent use.
type AuditLog struct {
	db *pgxpool.Pool
}

// Append appends e to the audit log.
func (l *AuditLog) Append(ctx context.Context, e Entry) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error { return audit(ctx, tx, e) })
}

// Since returns the audit log from since on, oldest first.
func (l *AuditLog) Since(ctx context.Context, since time.Time) ([]Entry, error) {
	rows, err := l.db.Query(ctx, `SELECT id, at, event, actor, source, reason, hold_id, detail FROM throttled.audit
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

// audit appends e to the audit log in tx, the transaction of the change
// it tells.
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

// storable is s with what [hold.Storable] refuses replaced by U+FFFD.
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
