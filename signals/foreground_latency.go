package signals

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Foreground latency is the latency the primary's own users feel, read
// from a canary: a tiny write, committed with synchronous_commit on, timed
// on a connection of its own every Interval.
//
// Why a canary and not pg_stat_statements. pg_stat_statements keeps
// cumulative times per (userid, dbid, queryid); it cannot tell the job's
// sessions or the sampler's from the users' (no application_name), it
// needs shared_preload_libraries (a restart) and CREATE EXTENSION, and a
// mean over whatever statements happened to run in an interval moves with
// the workload's mix (one report query starts, the mean doubles) as much
// as with contention. The canary is the same statement every time, so a
// change in its latency is a change in the server, not in the mix. It
// measures what a short foreground transaction waits on: queueing for
// CPU, buffer and WAL-insert LWLocks, and, because it commits a write,
// WAL flush (and a synchronous standby, where there is one): exactly the
// commit wait a write-heavy cleanup adds, which primary_load (on-CPU
// sessions) cannot see. What it does not see: heavyweight locks on the
// users' own tables (primary_lock_wait does), and a plan gone slow in one
// query of theirs.
//
// The cost: one more connection, and about four one-row commits a second
// (a few hundred bytes of WAL each) on throttled.canary, the one table the
// otherwise read-only sampling role writes (migration 0008 grants it to
// pg_monitor; `throttled migrate` creates it).
//
// The signal is a ratio to a baseline the canary learns while no job is
// working: a window (Config.ForegroundLatencyWindow) in which every
// primary_job_sessions reading was 0 and every probe succeeded gives its
// median, and the baseline follows those slowly up (5 % of the
// difference a window) and faster down (30 %), so a load that follows a
// job (autovacuum, a checkpoint) does not become the new normal. While the
// jobs work the baseline holds still. Until the first such window the
// ratio is unknown (ErrBaselineWarmup), never 1 or 0.

// CanaryAppName is the application_name of the canary's session. It does
// not start with [JobAppPrefix]: the canary is not background work.
const CanaryAppName = "throttled-canary"

// CanaryTable is the table the canary writes: schema throttled, made by
// throttled's migrations.
const CanaryTable = "throttled.canary"

// canarySQL bumps one free slot of the canary table: SKIP LOCKED, so two
// samplers never queue on each other's row and the latency is the
// server's, not theirs. Run with no arguments, pgx sends it with the
// simple protocol: one round trip, committed before the reply.
const canarySQL = `UPDATE ` + CanaryTable + ` SET beats = beats + 1, beat_at = now()
WHERE slot = (SELECT slot FROM ` + CanaryTable + ` ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED)`

// DefaultForegroundLatencyWindow is the default length of a baseline
// window.
const DefaultForegroundLatencyWindow = 10 * time.Second

// Baseline learning.
const (
	// baselineQuantile of a quiet window's latencies is what the window
	// teaches: the median, so a stray slow commit does not raise the
	// baseline and an idle server reads 1.0.
	baselineQuantile = 0.5
	// baselineUp and baselineDown are the share of the difference one
	// quiet window moves the baseline by, upward and downward.
	baselineUp   = 0.05
	baselineDown = 0.3
	// baselineFloor is the least baseline, in seconds: under it the
	// latency is the clock's and the scheduler's noise, and a ratio to it
	// would swing by whole units.
	baselineFloor = 50e-6
	// minWindowProbes is how many probes a window needs to teach.
	minWindowProbes = 4
	// recentProbes is how many of the latest probes the raw ratio is the
	// median of: one slow commit (a stray fsync) is not a reading the
	// controller should cut by 75 % for, three are.
	recentProbes = 5
	// warmupWarnWindows is how many windows without a baseline pass before
	// the wait is logged as a warning.
	warmupWarnWindows = 6
)

var (
	// ErrCanary marks a foreground-latency sample whose canary commit
	// failed: the latency is unknown.
	ErrCanary = errors.New("signals: foreground latency canary failed")
	// ErrBaselineWarmup marks a foreground_latency sample taken before any
	// baseline was learnt: the latency is known (foreground_latency_seconds)
	// but not what it should be compared with.
	ErrBaselineWarmup = errors.New("signals: foreground latency baseline not learnt yet")
	errNoCanarySlot   = errors.New("no free row in " + CanaryTable + " (every slot locked, or the table is empty)")
)

// canarySampler times the canary on its own connection to the primary.
type canarySampler struct {
	srv *server
	// idle reports whether the jobs were idle at an instant: a fresh
	// primary_job_sessions reading of 0.
	idle func(now time.Time) bool
	fg   foreground
	log  hclog.Logger
}

func newCanarySampler(cfg Config, idle func(time.Time) bool) (*canarySampler, error) {
	log := cfg.Logger.With("signal", string(ForegroundLatency))
	srv, err := newServer(kindPrimary, cfg.PrimaryDSN, cfg.Timeout, cfg.AllowSuperuser, log)
	if err != nil {
		return nil, err
	}
	// The canary writes, and its commit must wait for WAL flush as a
	// foreground commit does, whatever the server's default.
	srv.cfg.RuntimeParams["application_name"] = CanaryAppName
	srv.cfg.RuntimeParams["default_transaction_read_only"] = "off"
	srv.cfg.RuntimeParams["synchronous_commit"] = "on"
	return &canarySampler{srv: srv, idle: idle, log: log,
		fg: foreground{window: cfg.ForegroundLatencyWindow, smooth: ewma{tau: cfg.Smoothing}}}, nil
}

func (s *canarySampler) id() string      { return "canary" }
func (s *canarySampler) server() *server { return s.srv }

func (s *canarySampler) sample(ctx context.Context, now func() time.Time) []Sample {
	idle := s.idle(now())
	var took time.Duration
	err := s.srv.do(ctx, now(), func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		took, err = probe(ctx, conn)
		return err
	})
	at := now()
	if err != nil {
		return s.fg.failed(at, canaryError(err))
	}
	had := s.fg.baseline
	out := s.fg.add(took.Seconds(), idle, at)
	switch {
	case had == 0 && s.fg.baseline > 0:
		s.log.Info("foreground latency baseline learnt", "baseline_ms", s.fg.baseline*1e3)
	case s.fg.baseline == 0 && !s.fg.warned && at.Sub(s.fg.first) >= warmupWarnWindows*s.fg.window:
		s.fg.warned = true
		s.log.Warn("foreground latency baseline still not learnt: no job-free window yet; the signal stays unknown",
			"waited", at.Sub(s.fg.first).Round(time.Second), "window", s.fg.window)
	}
	return out
}

// preflight commits one canary on the open connection, so that a missing
// table or grant fails [Poller.Connect] with a clear error.
func (s *canarySampler) preflight(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(StartTimeout, s.srv.timeout))
	defer cancel()
	if _, err := probe(ctx, s.srv.conn); err != nil {
		return canaryError(fmt.Errorf("primary %s: %w", s.srv.addr, classify(err, s.srv.timeout)))
	}
	return nil
}

// probe commits one canary write and returns how long it took, round
// trip included.
func probe(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	start := time.Now()
	tag, err := conn.Exec(ctx, canarySQL)
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() != 1 {
		return 0, errNoCanarySlot
	}
	return took, nil
}

// canaryError marks err as a canary failure, with what to do about the
// failures a person can fix.
func canaryError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "3F000": // undefined_table, invalid_schema_name
			return fmt.Errorf("%w: %s is missing; run `throttled migrate` on the primary's database: %w", ErrCanary, CanaryTable, err)
		case "42501": // insufficient_privilege
			return fmt.Errorf("%w: the sampling role may not write %s; grant it pg_monitor (the migration grants the table to pg_monitor): %w", ErrCanary, CanaryTable, err)
		case "25006": // read_only_sql_transaction
			return fmt.Errorf("%w: the primary refuses writes (read-only transaction): %w", ErrCanary, err)
		}
	}
	return fmt.Errorf("%w: %w", ErrCanary, err)
}

// foreground turns canary latencies into the foreground-latency samples
// and learns their baseline. It is pure: time comes in with each reading.
// The zero value with a window set is ready; it is not safe for
// concurrent use.
type foreground struct {
	window time.Duration
	smooth ewma
	// recent are the latest latencies, oldest first, at most recentProbes.
	recent []float64
	// win holds the current window's latencies while it is quiet (every
	// reading idle, none failed), since winStart.
	win      []float64
	winStart time.Time
	// baseline is the learnt latency in seconds; 0 until the first quiet
	// window.
	baseline float64
	// first is the first reading's time, for the warm-up's length.
	first  time.Time
	warned bool
}

// add records a latency in seconds taken at at, idle telling whether the
// jobs were idle, and returns the samples.
func (f *foreground) add(latency float64, idle bool, at time.Time) []Sample {
	if f.first.IsZero() {
		f.first = at
	}
	f.learn(latency, idle, at)
	f.recent = append(f.recent, latency)
	if len(f.recent) > recentProbes {
		f.recent = slices.Delete(f.recent, 0, len(f.recent)-recentProbes)
	}
	recent := quantile(f.recent, 0.5)
	smoothed := f.smooth.add(recent, at)
	out := []Sample{{Name: ForegroundLatencySeconds, Value: smoothed, Raw: latency, Unit: UnitSeconds, At: at}}
	if f.baseline == 0 {
		err := fmt.Errorf("%w: waiting for a %s window with no job session active (%s so far)",
			ErrBaselineWarmup, f.window, at.Sub(f.first).Round(time.Second))
		return append(out, failed(ForegroundLatency, nil, UnitRatio, at, err))
	}
	return append(out, Sample{Name: ForegroundLatency, Value: smoothed / f.baseline,
		Raw: recent / f.baseline, Unit: UnitRatio, At: at})
}

// learn adds a reading to the current window and, when a quiet window is
// complete, moves the baseline toward its median. A reading taken
// while a job worked ends the window unlearnt.
func (f *foreground) learn(latency float64, idle bool, at time.Time) {
	if !idle {
		f.win = f.win[:0]
		return
	}
	if len(f.win) == 0 {
		f.winStart = at
	}
	f.win = append(f.win, latency)
	if at.Sub(f.winStart) < f.window {
		return
	}
	if len(f.win) >= minWindowProbes {
		q := max(quantile(f.win, baselineQuantile), baselineFloor)
		switch {
		case f.baseline == 0:
			f.baseline = q
		case q > f.baseline:
			f.baseline += baselineUp * (q - f.baseline)
		default:
			f.baseline += baselineDown * (q - f.baseline)
		}
	}
	f.win = f.win[:0]
}

// failed returns the samples of a failed probe. A failure ends the
// current window unlearnt and forgets the recent latencies, so the raw
// ratio after it comes from new probes only.
func (f *foreground) failed(at time.Time, err error) []Sample {
	if f.first.IsZero() {
		f.first = at
	}
	f.win, f.recent = f.win[:0], f.recent[:0]
	return []Sample{
		failed(ForegroundLatencySeconds, nil, UnitSeconds, at, err),
		failed(ForegroundLatency, nil, UnitRatio, at, err),
	}
}

// quantile returns the q-quantile of xs (nearest rank, lower), or NaN for
// none. xs is not modified.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
