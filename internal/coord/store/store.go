// Package store holds every statement coordinated mode runs on its two
// tables, throttled.workers (one row per worker: its job, limits, counters
// and lease) and throttled.leader (the leader's last decision, its critical
// pause, and a person's request to resume it). The leader, the workers,
// the CLI's status and the tests read and write them only through a Store.
// It also runs the election's statements (election.go): the leader's
// session advisory lock, and whether a leader publishes.
// It is a leaf over pgx: its types are plain, and the coordination engine
// (package coord) turns them into throttle's.
package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The tables, as errors and grants name them.
const (
	WorkersTable = "throttled.workers"
	LeaderTable  = "throttled.leader"
)

// DB is what a Store needs of a pool (pgxpool.Pool has it).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store runs coordinated mode's statements on db. Every method is bounded
// by its ctx only: callers set the deadline.
type Store struct{ db DB }

// New returns a Store on db.
func New(db DB) *Store { return &Store{db: db} }

// TableError is a statement's failure with the table it was on, so a
// refusal can name the privilege missing.
type TableError struct {
	Table string
	Err   error
}

func (e *TableError) Error() string { return e.Table + ": " + e.Err.Error() }
func (e *TableError) Unwrap() error { return e.Err }

func on(table string, err error) error {
	if err == nil {
		return nil
	}
	return &TableError{Table: table, Err: err}
}

// Worker is a worker's registration: its job and limits.
type Worker struct {
	ID, Job                  string
	Weight, MinRate, MaxRate float64
	// Tables the job writes; Signals the job rules that bind it, nil for
	// every one.
	Tables, Signals []string
	// PrefersLead: the worker's process should lead when it can (it
	// pages); a deferring leader yields to it.
	PrefersLead bool
}

// Upsert registers w, or renews its heartbeat and limits.
func (s *Store) Upsert(ctx context.Context, w Worker) error {
	tables := w.Tables
	if tables == nil {
		tables = []string{}
	}
	_, err := s.db.Exec(ctx, `INSERT INTO throttled.workers (id, job, weight, min_rate, max_rate, tables, signals, prefers_lead) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), weight = $3, min_rate = $4, max_rate = $5, tables = $6, signals = $7, prefers_lead = $8`,
		w.ID, w.Job, w.Weight, w.MinRate, w.MaxRate, tables, w.Signals, w.PrefersLead)
	return on(WorkersTable, err)
}

// PreferredAlive reports whether a live worker (one that heartbeat within
// within) of another process than proc prefers to lead.
func (s *Store) PreferredAlive(ctx context.Context, proc string, within time.Duration) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM throttled.workers WHERE prefers_lead AND NOT starts_with(id, $1 || '/')
		AND heartbeat_at > now() - make_interval(secs => $2))`, proc, within.Seconds()).Scan(&ok)
	return ok, on(WorkersTable, err)
}

// Delete removes the worker id.
func (s *Store) Delete(ctx context.Context, id string) error {
	_, err := s.db.Exec(ctx, "DELETE FROM throttled.workers WHERE id = $1", id)
	return on(WorkersTable, err)
}

// Counters are a worker's totals since it started.
type Counters struct {
	Batches, Errors int64
	DurationMs      float64
	// Waiting: a caller waited for the worker's limiter since the last
	// heartbeat (it wants more than its share).
	Waiting bool
	// Limited is the seconds the worker's job spent at each limit in its
	// process (status.Why to seconds); nil writes none.
	Limited map[string]float64
}

// Binding is a binding signal as the leader stores it: the signal's name
// and its sample's labels, apart (nil labels for none), so nothing that
// reads it back parses a key.
type Binding struct {
	Signal string
	Labels map[string]string
}

// labelsJSON is labels as a labels column takes them: an object, never
// null.
func labelsJSON(labels map[string]string) map[string]string {
	if labels == nil {
		return map[string]string{}
	}
	return labels
}

// Lease is a worker's allocation as the leader published it.
type Lease struct {
	Rate               float64
	Burst, MaxInFlight int
	// Remaining is how long the lease still runs; 0 once it lapsed.
	Remaining time.Duration
	// State, Code, Reason and Binding are the job's status as the leader
	// decided it; Code is "" in a row an older leader wrote.
	State, Code, Reason string
	Binding             Binding
}

// Beat records worker id's counters and heartbeat and returns its lease.
// The error wraps pgx.ErrNoRows when the row is gone (removed as stale).
func (s *Store) Beat(ctx context.Context, id string, c Counters) (Lease, error) {
	var l Lease
	var remaining float64
	err := s.db.QueryRow(ctx, `UPDATE throttled.workers
		SET heartbeat_at = now(), batches = $2, errors = $3, duration_ms = $4, waiting = $5, limited_seconds = $6
		WHERE id = $1
		RETURNING alloc_rate, alloc_burst, alloc_inflight, CASE WHEN lease_until > now() THEN extract(epoch FROM lease_until - now())::float8 ELSE 0 END, state, code, reason, binding, binding_labels`,
		id, c.Batches, c.Errors, c.DurationMs, c.Waiting, limitedJSON(c.Limited)).
		Scan(&l.Rate, &l.Burst, &l.MaxInFlight, &remaining, &l.State, &l.Code, &l.Reason, &l.Binding.Signal, &l.Binding.Labels)
	if err != nil {
		return Lease{}, on(WorkersTable, err)
	}
	// A lease is seconds long; anything else (NaN, an hour) is no lease.
	if remaining > 0 && remaining < float64(time.Hour/time.Second) {
		l.Remaining = time.Duration(remaining * float64(time.Second))
	}
	return l, nil
}

// Live is a worker that heartbeat recently, with its counters.
type Live struct {
	Worker
	Batches, Errors, DurationMs float64
	// Waiting: a caller waited for the worker's limiter since its
	// previous heartbeat.
	Waiting bool
}

// LiveWorkers lists the workers that heartbeat within the last within.
func (s *Store) LiveWorkers(ctx context.Context, within time.Duration) ([]Live, error) {
	rows, err := s.db.Query(ctx, `SELECT id, job, weight, min_rate, max_rate, tables, signals, batches, errors, duration_ms, waiting
		FROM throttled.workers WHERE heartbeat_at > now() - make_interval(secs => $1)`, within.Seconds())
	if err != nil {
		return nil, on(WorkersTable, err)
	}
	live, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Live, error) {
		var w Live
		var b, e int64
		err := r.Scan(&w.ID, &w.Job, &w.Weight, &w.MinRate, &w.MaxRate, &w.Tables, &w.Signals, &b, &e, &w.DurationMs, &w.Waiting)
		w.Batches, w.Errors = float64(b), float64(e)
		return w, err
	})
	return live, on(WorkersTable, err)
}

// Last is what the last leader published that a new one takes over.
type Last struct {
	// Budget is the published budget; Recent says it is under a minute
	// old.
	Budget float64
	Recent bool
	// Critical is the critical pause it was in, if any (Signal "" when
	// none).
	Critical
}

// LastLeader reads the last leader's publication; the zero Last when no
// leader ever published.
func (s *Store) LastLeader(ctx context.Context) (Last, error) {
	var l Last
	err := s.db.QueryRow(ctx, `SELECT budget, published_at > now() - interval '1 minute', critical_signal, critical_labels, critical_since, latched, pause_budget,
			critical_value, critical_threshold, critical_quiet_since
		FROM throttled.leader WHERE id = 1`).Scan(&l.Budget, &l.Recent, &l.Signal.Signal, &l.Signal.Labels, &l.Since, &l.Latched, &l.PauseBudget, &l.Value, &l.Threshold, &l.QuietSince)
	if errors.Is(err, pgx.ErrNoRows) {
		return Last{}, nil
	}
	return l, on(LeaderTable, err)
}

// ClaimResume takes a person's request to resume a latched critical
// pause: who asked, and false when none waits.
func (s *Store) ClaimResume(ctx context.Context) (by string, ok bool, err error) {
	err = s.db.QueryRow(ctx, `UPDATE throttled.leader SET resume_requested_at = NULL, resume_by = NULL
		WHERE id = 1 AND resume_requested_at IS NOT NULL RETURNING coalesce(resume_by, '')`).Scan(&by)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, on(LeaderTable, err)
	}
	return by, true, nil
}

// RequestResume asks the leader, as actor, to end its latched critical
// pause; false when the last published decision is not latched.
func (s *Store) RequestResume(ctx context.Context, actor string) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE throttled.leader SET resume_requested_at = now(), resume_by = $1 WHERE id = 1 AND latched`, actor)
	if err != nil {
		return false, on(LeaderTable, err)
	}
	return tag.RowsAffected() > 0, nil
}

// Critical is the critical pause a leader is in, as published and as a
// new leader reads it back.
type Critical struct {
	Signal      Binding
	Since       *time.Time
	Latched     bool
	PauseBudget float64
	// Value and Threshold are nil when the reading is not known.
	Value, Threshold *float64
	QuietSince       *time.Time
}

// WorkerLease is one worker's share of a decision.
type WorkerLease struct {
	ID                  string
	Rate                float64
	Burst, InFlight     int32
	State, Code, Reason string
}

// Publication is what a leader publishes at each tick.
type Publication struct {
	Leader       string
	Budget       float64
	Mode, Reason string
	Binding      Binding
	Critical     Critical
	// Lease is how long every worker's lease runs from now.
	Lease time.Duration
	// Term is the writer's fencing term (TakeTerm): nothing is written
	// once another process took a newer one.
	Term    int64
	Workers []WorkerLease
}

// Publish writes p in one transaction: the leader's decision, every
// worker's lease, and the removal of workers silent for a minute. The
// leases are renewed only together with the decision they come from, or
// not at all, and only while p.Term is still the leader's fencing term,
// checked in the same statement: otherwise nothing is written and the
// error is a *FencedError. A failure is a TableError naming the table
// written.
func (s *Store) Publish(ctx context.Context, p Publication) error {
	var ids, states, codes, reasons []string
	var rates []float64
	var bursts, inflights []int32
	for _, w := range p.Workers {
		ids, rates, states, codes, reasons = append(ids, w.ID), append(rates, w.Rate), append(states, w.State), append(codes, w.Code), append(reasons, w.Reason)
		bursts, inflights = append(bursts, w.Burst), append(inflights, w.InFlight)
	}
	c := p.Critical
	b := &pgx.Batch{}
	// One statement: the decision is written only while the term is the
	// writer's, and the leases only with it.
	b.Queue(`WITH l AS (
			INSERT INTO throttled.leader (id, leader, budget, mode, binding, binding_labels, reason, published_at,
				critical_signal, critical_labels, critical_since, latched, pause_budget, critical_value, critical_threshold, critical_quiet_since, term)
			VALUES (1, $1, $2, $3, $4, $13, $5, now(), $6, $14, $7, $8, $9, $10, $11, $12, $15)
			ON CONFLICT (id) DO UPDATE SET leader = $1, budget = $2, mode = $3, binding = $4, binding_labels = $13, reason = $5, published_at = now(),
				critical_signal = $6, critical_labels = $14, critical_since = $7, latched = $8, pause_budget = $9,
				critical_value = $10, critical_threshold = $11, critical_quiet_since = $12,
				resume_requested_at = CASE WHEN $8 THEN throttled.leader.resume_requested_at END,
				resume_by = CASE WHEN $8 THEN throttled.leader.resume_by END
			WHERE throttled.leader.term = $15
			RETURNING 1),
		w AS (
			UPDATE throttled.workers w SET alloc_rate = u.rate, alloc_burst = u.burst, alloc_inflight = u.inflight,
				lease_until = now() + make_interval(secs => $22), state = u.state, code = u.code, reason = u.reason, binding = $4, binding_labels = $13
			FROM unnest($16::text[], $17::float8[], $18::int[], $19::int[], $20::text[], $21::text[], $23::text[]) AS u(id, rate, burst, inflight, state, reason, code), l
			WHERE w.id = u.id
			RETURNING 1)
		SELECT count(*) FROM l`,
		p.Leader, p.Budget, p.Mode, p.Binding.Signal, p.Reason, c.Signal.Signal, c.Since, c.Latched, c.PauseBudget, c.Value, c.Threshold, c.QuietSince,
		labelsJSON(p.Binding.Labels), labelsJSON(c.Signal.Labels), p.Term,
		ids, rates, bursts, inflights, states, reasons, p.Lease.Seconds(), codes)
	b.Queue(`DELETE FROM throttled.workers WHERE heartbeat_at < now() - interval '1 minute'
		AND EXISTS (SELECT 1 FROM throttled.leader WHERE id = 1 AND term = $1)`, p.Term)
	br := s.db.SendBatch(ctx, b)
	var wrote int64
	if err := br.QueryRow().Scan(&wrote); err != nil {
		_ = br.Close()
		return on(LeaderTable, err)
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return on(WorkersTable, err)
	}
	if err := br.Close(); err != nil {
		return on(WorkersTable, err)
	}
	if wrote == 0 {
		return &FencedError{Term: p.Term}
	}
	return nil
}

// FencedError is a publication refused because another process took the
// leader's lock since its writer did: the term in throttled.leader is no
// longer the writer's. Nothing was written; the writer must step down.
type FencedError struct{ Term int64 }

func (e *FencedError) Error() string {
	return fmt.Sprintf("%s: term %d is over: another process took the leader's lock since", LeaderTable, e.Term)
}

// TakeTerm raises the leader's fencing term and returns it: run on the
// election session, once its lock is taken, before the first
// publication. A publication of an older term writes nothing after it.
func (s *Store) TakeTerm(ctx context.Context, leader string) (int64, error) {
	var term int64
	err := s.db.QueryRow(ctx, `INSERT INTO throttled.leader (id, leader, budget, mode, published_at, term) VALUES (1, $1, 0, 'stale', '-infinity', 1)
		ON CONFLICT (id) DO UPDATE SET term = throttled.leader.term + 1 RETURNING term`, leader).Scan(&term)
	return term, on(LeaderTable, err)
}

// Leader is the leader's last publication, for people.
type Leader struct {
	Leader, Mode, Reason string
	Binding              Binding
	Budget               float64
	PublishedAt          time.Time
}

// WorkerState is one live worker's lease, for people.
type WorkerState struct {
	ID, Job, State, Code, Reason string
	Rate                         float64
	LeaseValid                   bool
	// LimitedSeconds is the seconds the worker's job spent at each limit
	// in its process, as its last heartbeat wrote them (Counters.Limited).
	LimitedSeconds map[string]float64
}

// limitedJSON is m as the limited_seconds column takes it: an object of
// finite seconds, never null.
func limitedJSON(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if v >= 0 && !math.IsInf(v, 1) {
			out[k] = v
		}
	}
	return out
}

// Status reads the leader's last publication (ok false when none) and the
// workers that heartbeat within the last within.
func (s *Store) Status(ctx context.Context, within time.Duration) (l Leader, ok bool, ws []WorkerState, err error) {
	err = s.db.QueryRow(ctx, "SELECT leader, mode, binding, binding_labels, reason, budget, published_at FROM throttled.leader WHERE id = 1").
		Scan(&l.Leader, &l.Mode, &l.Binding.Signal, &l.Binding.Labels, &l.Reason, &l.Budget, &l.PublishedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return Leader{}, false, nil, on(LeaderTable, err)
	default:
		ok = true
	}
	rows, err := s.db.Query(ctx, `SELECT id, job, state, code, reason, alloc_rate, lease_until > now(), limited_seconds FROM throttled.workers
		WHERE heartbeat_at > now() - make_interval(secs => $1) ORDER BY job, id`, within.Seconds())
	if err != nil {
		return l, ok, nil, on(WorkersTable, err)
	}
	ws, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (WorkerState, error) {
		var w WorkerState
		err := r.Scan(&w.ID, &w.Job, &w.State, &w.Code, &w.Reason, &w.Rate, &w.LeaseValid, &w.LimitedSeconds)
		w.LimitedSeconds = limitedJSON(w.LimitedSeconds)
		return w, err
	})
	return l, ok, ws, on(WorkersTable, err)
}
