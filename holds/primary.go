package holds

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/throttle/hold"
)

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
func (l *AuditLog) RecordPrimary(ctx context.Context, addr string, timeline int) (e Entry, changed bool, err error) {
	err = pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
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
