package signals

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sampler samples one server.
type sampler interface {
	id() string
	server() *server
	sample(ctx context.Context, now func() time.Time) []Sample
}

// primarySampler reads the primary's load, connection headroom and the
// lag of every replica in one round trip.
type primarySampler struct {
	srv      *server
	cores    float64
	smooth   *loadSmoother
	wal      walRate
	seen     map[string]bool
	expected func() []string
	// cur is the primary sampled last; publish hands it to the Poller.
	cur     Primary
	publish func(Primary)
}

func (s *primarySampler) id() string      { return "primary" }
func (s *primarySampler) server() *server { return s.srv }

// QueriesPerTick is how many statements one primary sampling tick runs;
// they go in a single round trip.
const QueriesPerTick = 8

func (s *primarySampler) sample(ctx context.Context, now func() time.Time) []Sample {
	var act activity
	var hr headroom
	var rows []walsenderRow
	var hz horizon
	var slots []slotRow
	var wrap wraparound
	var wal walRow
	var vacs []vacuumRow
	err := s.srv.do(ctx, now(), func(ctx context.Context, conn *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue(activitySQL).QueryRow(func(r pgx.Row) error {
			return r.Scan(&act.onCPU, &act.ioWait, &act.lockWait, &act.jobs, &act.seesSessions)
		})
		b.Queue(headroomSQL).QueryRow(func(r pgx.Row) error {
			return r.Scan(&hr.maxConns, &hr.superuserReserved, &hr.reserved, &hr.clients)
		})
		b.Queue(replicationSQL).Query(func(r pgx.Rows) error {
			var err error
			rows, err = pgx.CollectRows(r, func(row pgx.CollectableRow) (walsenderRow, error) {
				var w walsenderRow
				err := row.Scan(&w.PID, &w.AppName, &w.State, &w.LagBytes, &w.LagSeconds, &w.SlotName, &w.SlotType, &w.SlotTemp)
				return w, err
			})
			return err
		})
		b.Queue(horizonSQL).QueryRow(func(r pgx.Row) error {
			return r.Scan(&hz.xids, &hz.secs, &hz.kind, &hz.holder)
		})
		b.Queue(slotsSQL).Query(func(r pgx.Rows) error {
			var err error
			slots, err = pgx.CollectRows(r, func(row pgx.CollectableRow) (slotRow, error) {
				var x slotRow
				err := row.Scan(&x.name, &x.kind, &x.active, &x.retained, &x.walStatus, &x.safe)
				return x, err
			})
			return err
		})
		b.Queue(wraparoundSQL).QueryRow(func(r pgx.Row) error { return r.Scan(&wrap.fraction) })
		b.Queue(walSQL).QueryRow(func(r pgx.Row) error {
			return r.Scan(&wal.lsn, &wal.archiveOn, &wal.pending, &wal.archiveFailed)
		})
		b.Queue(vacuumSQL).Query(func(r pgx.Rows) error {
			var err error
			vacs, err = pgx.CollectRows(r, func(row pgx.CollectableRow) (vacuumRow, error) {
				var v vacuumRow
				err := row.Scan(&v.table, &v.here, &v.wraparound)
				return v, err
			})
			return err
		})
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			// A privilege of pg_monitor refused (pg_ls_archive_statusdir
			// needs it) is the same lost grant as the check below.
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42501" {
				return &GrantError{Role: s.srv.role}
			}
			return err
		}
		if !act.seesSessions {
			// Every count and every walsender would read as if idle.
			return &GrantError{Role: s.srv.role}
		}
		return nil
	})
	at := now()
	if err == nil {
		if old, ok := s.observe(s.srv.primary, at); ok {
			s.srv.log.Warn("primary changed; replica inventory re-read from the new primary", "from", old.String(), "to", s.cur.String())
		}
		s.cur.Checked = at
		s.publish(s.cur)
	}
	known := s.expected()
	for n := range s.seen {
		known = append(known, n)
	}
	if err != nil {
		out := append(activityFailed(at, err), headroomFailed(at, err)...)
		out = append(out, horizonFailed(at, err)...)
		out = append(out, slotsFailed(at, err)...)
		out = append(out, wraparoundFailed(at, err)...)
		out = append(out, walFailed(at, err)...)
		out = append(out, vacuumFailed(at, err)...)
		return append(out, replicaLagFailed(dedupe(known), at, err)...)
	}
	out := append(act.samples(s.smooth, s.cores, at), hr.samples(at)...)
	out = append(out, hz.samples(at)...)
	out = append(out, slotSamples(slots, at)...)
	out = append(out, wrap.samples(at)...)
	out = append(out, wal.samples(&s.wal, at)...)
	out = append(out, vacuumSamples(vacs, at)...)
	for _, l := range classifyReplicas(rows, known) {
		if !l.anonymous {
			s.seen[l.name] = true
		}
		out = append(out, l.samples(at)...)
	}
	return out
}

// replicaSampler reads replica-side signals on one replica.
type replicaSampler struct {
	srv   *server
	sid   string
	learn func(string)
}

func (s *replicaSampler) id() string      { return s.sid }
func (s *replicaSampler) server() *server { return s.srv }

func (s *replicaSampler) sample(ctx context.Context, now func() time.Time) []Sample {
	var r replay
	err := s.srv.do(ctx, now(), func(ctx context.Context, conn *pgx.Conn) error {
		if err := conn.QueryRow(ctx, replaySQL).Scan(&r.inRecovery, &r.backlog, &r.pauseState, &r.seesSessions); err != nil {
			return err
		}
		if !r.seesSessions {
			return &GrantError{Role: s.srv.role}
		}
		return nil
	})
	at := now()
	name := cmp.Or(s.srv.replicaName, s.srv.addr)
	s.learn(s.srv.replicaName)
	if err != nil {
		return replayFailed(name, at, err)
	}
	return r.samples(name, at)
}

func dedupe(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}
