package holds

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/jobname"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle/hold"
)

// Violation is a job's session that kept working under a hold.
type Violation struct {
	PID        int32
	Job        status.Job
	Holds      []hold.Hold
	RunningFor time.Duration // how long its transaction has run
	Query      string
	Cancelled  bool
}

// EnforcerConfig configures an [Enforcer].
type EnforcerConfig struct {
	// Grace is how long a job's transaction may run on after a hold
	// before it counts as not honouring it: the longest batch a job may
	// finish. Defaults to 10s.
	Grace time.Duration
	// Cancel cancels such sessions' queries (pg_cancel_backend), which
	// needs pg_signal_backend or the same role. Off by default: the
	// enforcer then only audits and reports.
	Cancel bool
}

// Enforcer finds the sessions of jobs that keep working under a hold, in
// pg_stat_activity, audits each one, and, when Config.Cancel is set,
// cancels its query with pg_cancel_backend: it acts on other processes'
// backends. A job's sessions are those tagged application_name
// "throttled:<job>"; seeing other roles' sessions needs
// pg_read_all_stats. It is safe for concurrent use, and several
// enforcers, in one process or many, audit a violation once.
type Enforcer struct {
	db  *pgxpool.Pool
	w   *Watcher
	cfg EnforcerConfig
}

// NewEnforcer returns an Enforcer that checks the sessions on db against
// the holds w applies.
func NewEnforcer(db *pgxpool.Pool, w *Watcher, cfg EnforcerConfig) *Enforcer {
	cfg.Grace = cmp.Or(cfg.Grace, 10*time.Second)
	return &Enforcer{db: db, w: w, cfg: cfg}
}

// Enforce checks once: it looks for job sessions whose transaction has
// run longer than Grace while a hold that pauses the job applies (work
// that does not honour the pause), audits each one once (per backend and
// transaction, event pause_not_honoured), and cancels its query when
// Config.Cancel is set. It returns the violations found now, new or not.
func (e *Enforcer) Enforce(ctx context.Context) ([]Violation, error) {
	cfg, w := e.cfg, e.w
	rows, err := e.db.Query(ctx, `SELECT pid, application_name, extract(epoch FROM now() - xact_start)::float8, left(query, 200),
			backend_start, xact_start
		FROM pg_stat_activity
		WHERE starts_with(application_name, $1) AND state <> 'idle' AND xact_start < now() - make_interval(secs => $2)
		  AND pid <> pg_backend_pid()`, jobname.AppPrefix, cfg.Grace.Seconds())
	if err != nil {
		return nil, fmt.Errorf("holds: enforce: %w", err)
	}
	type session struct {
		v                Violation
		backend, xactBeg time.Time
	}
	sessions, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (session, error) {
		var s session
		var app string
		var secs float64
		err := r.Scan(&s.v.PID, &app, &secs, &s.v.Query, &s.backend, &s.xactBeg)
		s.v.Job = status.Job(strings.TrimPrefix(app, jobname.AppPrefix))
		s.v.RunningFor = time.Duration(secs * float64(time.Second))
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("holds: enforce: %w", err)
	}
	now := w.now()
	var out []Violation
	for _, sess := range sessions {
		v := sess.v
		// A hold must have applied for the whole grace period: work that
		// began before a fresh hold gets its grace. Its age is the
		// database's, on this process's clock.
		for _, h := range w.applying(now, string(v.Job)) {
			if !h.Pauses() {
				continue // a ratio hold lets the job work, slower
			}
			if h.ID == UnconfirmedHoldID || now.Sub(h.since) >= cfg.Grace {
				v.Holds = append(v.Holds, h.Hold)
			}
		}
		if len(v.Holds) == 0 {
			continue
		}
		if cfg.Cancel {
			if err := e.db.QueryRow(ctx, "SELECT pg_cancel_backend($1)", v.PID).Scan(&v.Cancelled); err != nil {
				return out, fmt.Errorf("holds: cancel pid %d: %w", v.PID, err)
			}
		}
		var ids []string
		for _, h := range v.Holds {
			ids = append(ids, h.ID)
		}
		// One audit line per backend and transaction, whichever process
		// sees it first: the check and the insert run under a lock on
		// that pair, so two enforcers at once cannot both miss the
		// other's line; the start is compared as a time, whatever zone
		// each process writes it in.
		xactStart := sess.xactBeg.UTC().Format(time.RFC3339Nano)
		err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
				fmt.Sprintf("pause_not_honoured:%d:%s", v.PID, xactStart)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO throttled.audit (event, actor, source, reason, detail)
				SELECT $1, 'throttled', 'auto', $2, $3
				WHERE NOT EXISTS (SELECT 1 FROM throttled.audit WHERE event = $1
					AND detail->>'pid' = $4 AND (detail->>'xact_start')::timestamptz = $5)`,
				EventPauseNotHonoured,
				fmt.Sprintf("job %s kept working %s under hold %s", v.Job, v.RunningFor.Round(time.Second), strings.Join(ids, ", ")),
				map[string]any{"pid": fmt.Sprint(v.PID), "job": v.Job, "holds": ids, "running_for_s": v.RunningFor.Seconds(),
					"query": v.Query, "cancelled": v.Cancelled, "backend_start": sess.backend, "xact_start": xactStart},
				fmt.Sprint(v.PID), sess.xactBeg)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("holds: audit violation: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}
