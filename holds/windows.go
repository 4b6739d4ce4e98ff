package holds

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/throttle/hold"
)

// windowRow is one row of throttled.windows.
type windowRow struct{ job, kind, name, spec string }

// windowRows flattens ws into rows, sorted.
func windowRows(ws hold.Windows) []windowRow {
	var out []windowRow
	for _, j := range slices.Sorted(maps.Keys(ws)) {
		jw := ws[j]
		for _, w := range jw.Run {
			out = append(out, windowRow{string(j), "run", "", w.String()})
		}
		for _, name := range slices.Sorted(maps.Keys(jw.Avoid)) {
			out = append(out, windowRow{string(j), "avoid", name, jw.Avoid[name].String()})
		}
	}
	slices.SortFunc(out, func(a, b windowRow) int {
		return strings.Compare(a.job+"\x00"+a.kind+"\x00"+a.name+"\x00"+a.spec, b.job+"\x00"+b.kind+"\x00"+b.name+"\x00"+b.spec)
	})
	return out
}

// WindowStore writes the cluster's run and maintenance windows,
// throttled.windows, which every [Watcher] reads with the holds. Get one
// from [DB.Windows]. It is safe for concurrent use.
type WindowStore struct {
	db *pgxpool.Pool
}

// Set replaces the cluster's run and maintenance windows with ws, in one
// transaction, and audits a change (event windows, with the old and new
// windows in its detail); windows equal to the cluster's write nothing.
// `throttled run` calls it with its file's windows at start and on each
// applied reload, as it does [Store.SetTTL].
func (s *WindowStore) Set(ctx context.Context, ws hold.Windows, actor string, source hold.Source, reason string) error {
	if err := checkStorable("actor", actor, "source", string(source), "reason", reason); err != nil {
		return err
	}
	want := windowRows(ws)
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE throttled.windows IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return err
		}
		have, err := readWindowRows(ctx, tx)
		if err != nil {
			return err
		}
		if slices.Equal(have, want) {
			return nil
		}
		if _, err := tx.Exec(ctx, "DELETE FROM throttled.windows"); err != nil {
			return err
		}
		for _, r := range want {
			if _, err := tx.Exec(ctx, "INSERT INTO throttled.windows (job, kind, name, spec) VALUES ($1, $2, $3, $4)", r.job, r.kind, r.name, r.spec); err != nil {
				return err
			}
		}
		return audit(ctx, tx, Entry{Event: "windows", Actor: actor, Source: string(source), Reason: reason,
			Detail: map[string]any{"old": describeRows(have), "new": describeRows(want)}})
	})
	if err != nil {
		return fmt.Errorf("holds: set windows: %w", err)
	}
	return nil
}

func describeRows(rs []windowRow) []string {
	out := []string{}
	for _, r := range rs {
		if r.kind == "run" {
			out = append(out, fmt.Sprintf("%s runs %s", r.job, r.spec))
		} else {
			out = append(out, fmt.Sprintf("%s avoids %s (%s)", r.job, r.name, r.spec))
		}
	}
	return out
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func readWindowRows(ctx context.Context, q querier) ([]windowRow, error) {
	rows, err := q.Query(ctx, "SELECT job, kind, name, spec FROM throttled.windows ORDER BY job, kind, name, spec")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (windowRow, error) {
		var w windowRow
		err := r.Scan(&w.job, &w.kind, &w.name, &w.spec)
		return w, err
	})
}

// readWindows reads the cluster's windows. A row this version cannot read
// (a spec it does not parse, a kind it does not know) is an error: the
// watcher then fails closed, as for any unreadable hold state.
func readWindows(ctx context.Context, q querier) (hold.Windows, error) {
	rows, err := readWindowRows(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("holds: read windows: %w", err)
	}
	ws := hold.Windows{}
	for _, r := range rows {
		w, err := hold.ParseWindow(r.spec)
		if err != nil {
			return nil, fmt.Errorf("holds: throttled.windows row of job %q: %w", r.job, err)
		}
		jw := ws[r.job]
		switch r.kind {
		case "run":
			jw.Run = append(jw.Run, w)
		case "avoid":
			if jw.Avoid == nil {
				jw.Avoid = map[string]hold.Window{}
			}
			jw.Avoid[r.name] = w
		default:
			return nil, fmt.Errorf("holds: throttled.windows row of job %q: kind %q", r.job, r.kind)
		}
		ws[r.job] = jw
	}
	return ws, nil
}
