package signals

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Foreground latency is the latency the primary's own users feel, read
// from a canary: a tiny write, committed with synchronous_commit on, timed
// on a connection of its own every ForegroundLatencyInterval.
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
// The cost: one more connection, and twenty one-row commits a second by
// default (a few hundred bytes of WAL each) on throttled.canary, the one
// table the
// otherwise read-only sampling role writes (migration 0008 grants it to
// pg_monitor; `throttled migrate` creates it).
//
// The signal is a ratio: the mean latency of the probes of the last two
// seconds over the mean of those of them that saw no job session at work
// as they committed (the statement counts the job sessions at work). Both
// see whatever else moves the foreground's latency in those seconds (a
// surge of users, a neighbour on the host, another process's load), so
// the ratio is what the jobs add, what the controller may cut them for:
// 1 with no job at work, 1 + d(s-1) with jobs at work at a share d of the
// probes, slowing them by s. With fewer than ten job-free probes in the
// span the last baseline measured stands in, for up to
// Config.ForegroundLatencyWindow; past that the ratio is unknown, and a
// required rule stops the jobs until the canary has measured it again.
// Until the first baseline the ratio is unknown (ErrBaselineWarmup), never
// 1 or 0: ten job-free probes, half a second at the default interval. (A
// new leader does not start from the last one's baseline: measured on
// another connection at another time, it read a host busy with processes
// starting as the jobs' doing, and cut them to the floor.) When it becomes
// known the smoothing starts afresh, so the warm-up's readings do not
// weigh on the first ratios. A new connection's first commits fill its
// caches and do not count.

// CanaryAppName is the application_name of the canary's session. It does
// not start with [JobAppPrefix]: the canary is not background work.
const CanaryAppName = "throttled-canary"

// CanaryTable is the table the canary writes: schema throttled, made by
// throttled's migrations.
const CanaryTable = "throttled.canary"

// canarySQL bumps one free slot of the canary table: SKIP LOCKED, so two
// samplers never queue on each other's row and the latency is the
// server's, not theirs. One round trip, committed before the reply.
//
// It returns how many job sessions were at work as it committed: a probe
// that saw none teaches the baseline, so the baseline is the
// foreground's own latency, whatever else slows it, and a rise over it is
// the jobs'. A job statement queued on a heavyweight lock is not at work:
// it uses no CPU, writes no WAL and takes no buffer locks while it waits
// (the queue it may hold others in is primary_lock_wait's to see), so a
// probe that commits meanwhile measures the server without the job. Were
// it counted, a job that waits on a lock for seconds at a time would make
// those probes the busy ones: fast, they would pull the ratio under 1,
// and the baseline would come only from the seconds between the waits,
// when the job's batches run.
//
// It also returns the process IDs of the job sessions (in a transaction of
// a job's now, whatever its state) and of the foreground candidates:
// client backends that are neither throttled's (the job sessions, the
// sampler, the canary, the CLI: application_name starting with
// "throttled") nor its own, in a transaction now or done with one within
// the last compareSpan. A library job names its session only inside each
// batch's transaction (set_config(..., true)), so between batches its
// pooled connection is a candidate too: [canarySampler] leaves out the
// candidates it saw as job sessions within jobPIDMemory. A stretch of the
// canary's own commit on a primary where no other session is committing
// harms nobody: the canary protects a foreground that exists (see
// [foreground.addProbe]). A session idle after a ping ([PingQuery]) is not
// a candidate: on an idle primary a paused job's probe, every 30 s, made
// the canary count a user for two seconds, and its ratio of the working
// job's own commits to their baseline cut that job by 75 %.
const canarySQL = `UPDATE ` + CanaryTable + ` SET beats = beats + 1, beat_at = now()
WHERE slot = (SELECT slot FROM ` + CanaryTable + ` ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING (SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND wait_event_type IS DISTINCT FROM 'Lock'
	AND starts_with(application_name, '` + JobAppPrefix + `')),
  (SELECT array_agg(pid) FROM pg_stat_activity WHERE starts_with(application_name, '` + JobAppPrefix + `')),
  (SELECT array_agg(pid) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
	AND NOT starts_with(application_name, 'throttled')
	AND (state <> 'idle' OR (state_change > now() - interval '2 seconds' AND query <> '` + PingQuery + `')))`

// PingQuery is the statement pgx sends for a ping (pgconn's Ping): a
// session idle after it did no work a user does. A waiting job asks its
// database whether it answers with it (jobs: the outage probe), and a
// pool checks a connection idle for a second with it before handing it
// out; neither is a foreground to protect.
const PingQuery = "-- ping"

// DefaultForegroundLatencyWindow is how long, by default, a baseline
// measured earlier stands in while jobs are at work at nearly every
// probe. Past it the baseline is unknown: a required rule then stops the
// jobs for the half second the canary needs to measure it again.
const DefaultForegroundLatencyWindow = time.Minute

// DefaultForegroundLatencyInterval is how often the canary commits by
// default.
const DefaultForegroundLatencyInterval = 50 * time.Millisecond

// Comparing the probes.
const (
	// compareSpan is how far back the probes compared reach: the mean
	// latency of all of them over the mean of those that saw no job at
	// work is the ratio.
	compareSpan = 2 * time.Second
	// maxCompared bounds the probes kept in compareSpan.
	maxCompared = 256
	// minFree is how many job-free probes within compareSpan measure the
	// baseline afresh; with fewer the last one measured stands in, for up
	// to the window.
	minFree = 10
	// baselineFloor is the least baseline, in seconds. Under it the
	// latency is the scheduler's noise, and a ratio to it swings by whole
	// units: on an idle primary without fsync a commit takes 0.1-0.2 ms.
	// A commit within half a millisecond is fast whatever its ratio.
	baselineFloor = 500e-6
	// warmupWarn is how long without a baseline passes before the wait
	// is logged as a warning.
	warmupWarn = 10 * time.Second
)

var (
	// ErrCanary marks a foreground-latency sample whose canary commit
	// failed: the latency is unknown.
	ErrCanary = errors.New("signals: foreground latency canary failed")
	// ErrBaselineWarmup marks a foreground_latency sample taken before any
	// baseline was learnt: the latency is known (foreground_latency_seconds)
	// but not what it should be compared with.
	ErrBaselineWarmup = errors.New("signals: foreground latency baseline not learnt yet")
	// ErrCanaryUnavailable marks a canary that cannot run on this primary
	// at all, as opposed to one that failed this time: its table is
	// missing, the sampling role may not write it, or the primary refuses
	// writes. With Config.ForegroundLatencyAuto, [Poller.Connect] turns
	// the canary off on it instead of failing.
	ErrCanaryUnavailable = errors.New("signals: the foreground latency canary cannot run here")
	errNoCanarySlot      = errors.New("no free row in " + CanaryTable + " (every slot locked, or the table is empty)")
)

// canarySampler times the canary on its own connection to the primary.
type canarySampler struct {
	srv *server
	log hclog.Logger

	fg foreground
	// warm is the connection the last probes ran on: a new one warms up
	// before its probes count.
	warm *pgx.Conn
	// jobPIDs are the job sessions' process IDs, each with when a probe
	// last saw it in a job's transaction.
	jobPIDs map[int32]time.Time
}

// jobPIDMemory is how long a session seen in a job's transaction counts as
// the job's, not the users', while it is idle between batches.
const jobPIDMemory = time.Minute

// users counts the foreground candidates of a probe at at that are not
// job sessions seen within jobPIDMemory, after recording the job sessions
// it saw.
func (s *canarySampler) users(r probeResult, at time.Time) int {
	if s.jobPIDs == nil {
		s.jobPIDs = map[int32]time.Time{}
	}
	for _, pid := range r.jobPIDs {
		s.jobPIDs[pid] = at
	}
	for pid, seen := range s.jobPIDs {
		if at.Sub(seen) > jobPIDMemory {
			delete(s.jobPIDs, pid)
		}
	}
	n := 0
	for _, pid := range r.candidates {
		if _, job := s.jobPIDs[pid]; !job {
			n++
		}
	}
	return n
}

// warmProbes is how many commits a new canary connection makes before
// its latency counts: a backend's first statements fill its caches and
// plan, and read two to three times a warm one's latency.
const warmProbes = 3

func newCanarySampler(cfg Config) (*canarySampler, error) {
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
	return &canarySampler{srv: srv, log: log,
		fg: foreground{window: cfg.ForegroundLatencyWindow, held: cfg.ForegroundLatencyHeldBaseline, tail: cfg.ForegroundLatencyTail, smooth: ewma{tau: cfg.Smoothing}}}, nil
}

func (s *canarySampler) id() string      { return "canary" }
func (s *canarySampler) server() *server { return s.srv }

func (s *canarySampler) sample(ctx context.Context, now func() time.Time) []Sample {
	var r probeResult
	err := s.srv.do(ctx, now(), func(ctx context.Context, conn *pgx.Conn) error {
		if conn != s.warm {
			for range warmProbes {
				if _, err := probe(ctx, conn); err != nil {
					return err
				}
			}
			s.warm = conn
		}
		var err error
		r, err = probe(ctx, conn)
		return err
	})
	at := now()
	if err != nil {
		return s.fg.failed(at, canaryError(err))
	}
	had := s.fg.known
	out := s.fg.addProbe(r.took.Seconds(), r.jobs == 0, s.users(r, at) > 0, at)
	switch {
	case !had && s.fg.known:
		s.fg.warned = false
		s.log.Info("foreground latency baseline known", "baseline_ms", s.fg.base*1e3)
	case !s.fg.known && !s.fg.warned && at.Sub(s.fg.first) >= warmupWarn:
		s.fg.warned = true
		s.log.Warn("foreground latency baseline unknown: job sessions were at work at every probe; the signal stays unknown",
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

// probeResult is what one probe saw.
type probeResult struct {
	took time.Duration // round trip included
	jobs int64         // job sessions at work as it committed
	// jobPIDs are the sessions in a job's transaction; candidates those
	// that may be the users' (see canarySQL).
	jobPIDs, candidates []int32
}

// probe commits one canary write and returns what it saw.
func probe(ctx context.Context, conn *pgx.Conn) (probeResult, error) {
	var r probeResult
	start := time.Now()
	err := conn.QueryRow(ctx, canarySQL).Scan(&r.jobs, &r.jobPIDs, &r.candidates)
	r.took = time.Since(start)
	if errors.Is(err, pgx.ErrNoRows) {
		return probeResult{}, errNoCanarySlot
	}
	if err != nil {
		return probeResult{}, err
	}
	return r, nil
}

// canaryError marks err as a canary failure, with what to do about the
// failures a person can fix.
func canaryError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "3F000": // undefined_table, invalid_schema_name
			return fmt.Errorf("%w: %w: %s is missing; run `throttled migrate` on the primary's database: %w", ErrCanary, ErrCanaryUnavailable, CanaryTable, err)
		case "42501": // insufficient_privilege
			return fmt.Errorf("%w: %w: the sampling role may not write %s; grant it pg_monitor (the migration grants the table to pg_monitor): %w", ErrCanary, ErrCanaryUnavailable, CanaryTable, err)
		case "25006": // read_only_sql_transaction
			return fmt.Errorf("%w: %w: the primary refuses writes (read-only transaction): %w", ErrCanary, ErrCanaryUnavailable, err)
		}
	}
	return fmt.Errorf("%w: %w", ErrCanary, err)
}

// foreground turns canary probes into the foreground-latency samples.
// It compares the probes of the last compareSpan: the mean latency of all
// of them over the mean of those that saw no job session at work (the
// baseline, at least baselineFloor). Both see whatever else moves the
// foreground's latency in those seconds, a surge or a neighbour, so the
// ratio is what the jobs add: 1 with no job at work, 1 + d(s-1) with jobs
// at work at a share d of the probes, slowing those by s. With too few
// job-free probes in the span (jobs at work nearly all the time) the last
// baseline measured stands in, for up to window. It is pure: time comes
// in with each reading. The zero value with a window set is ready; it is
// not safe for concurrent use.
type foreground struct {
	window time.Duration
	// held: the baseline is measured only while it is unknown, when a
	// required rule holds the jobs (Config.ForegroundLatencyHeldBaseline);
	// runN and runSum are the measurement's job-free probes in a row so
	// far and their latencies' sum, after skip more have passed.
	held   bool
	runN   int
	runSum float64
	skip   int
	// tail compares the slowest fifth of the probes, not their mean
	// (Config.ForegroundLatencyTail): tailBase is the slowest fifth's mean
	// of the job-free probes that measured base, and runLats the held
	// measurement's latencies so far.
	tail     bool
	tailBase float64
	runLats  []float64
	smooth   ewma // of the ratio
	// probes are the latest, oldest first, within compareSpan of the
	// newest and at most maxCompared.
	probes []canaryProbe
	// base is the last baseline measured, in seconds, at baseAt; 0
	// before any.
	base   float64
	baseAt time.Time
	// known: the last reading had a baseline.
	known bool
	// first is the first reading's time, for the warm-up's length.
	first  time.Time
	warned bool
}

// canaryProbe is one probe: when, its latency in seconds, whether it
// saw no job session at work, and whether it saw a foreground session.
type canaryProbe struct {
	at    time.Time
	lat   float64
	free  bool
	users bool
}

// add records a probe as addProbe does, with a foreground present.
func (f *foreground) add(latency float64, free bool, at time.Time) []Sample {
	return f.addProbe(latency, free, true, at)
}

// addProbe records a probe's latency in seconds taken at at, free telling
// whether it saw no job session at work and users whether it saw a
// foreground session, and returns the samples.
//
// The ratio protects a foreground that exists: while no probe in the span
// saw a foreground session, it reads 1 whatever the canary's own commit
// waited for. On an idle primary the canary's commit queues behind the
// job's own, and that stretch, which harms nobody, cut a cleanup on a
// quiet Sunday to one batch every 51 s. The baseline is measured as
// ever, and the first probe that sees a user brings the ratio back.
//
// The mean leaves out the span's one slowest probe (with minFree probes
// or more): one commit that queued behind one checkpoint or one batch is
// one reading, not the foreground's latency, and as a mean of forty it
// read several times the baseline for two seconds.
func (f *foreground) addProbe(latency float64, free, users bool, at time.Time) []Sample {
	if f.first.IsZero() {
		f.first = at
	}
	f.probes = append(f.probes, canaryProbe{at: at, lat: latency, free: free, users: users})
	drop := max(0, len(f.probes)-maxCompared)
	for drop < len(f.probes)-1 && at.Sub(f.probes[drop].at) >= compareSpan {
		drop++
	}
	f.probes = slices.Delete(f.probes, 0, drop)
	var all, freeSum, slowest, slowestFree float64
	nFree := 0
	seen := false
	var lats, freeLats []float64
	for _, p := range f.probes {
		all += p.lat
		slowest = max(slowest, p.lat)
		seen = seen || p.users
		if f.tail {
			lats = append(lats, p.lat)
		}
		if p.free {
			freeSum += p.lat
			slowestFree = max(slowestFree, p.lat)
			nFree++
			if f.tail {
				freeLats = append(freeLats, p.lat)
			}
		}
	}
	mean := all / float64(len(f.probes))
	if n := len(f.probes); n >= minFree {
		mean = (all - slowest) / float64(n-1)
	}
	switch {
	case f.held:
		f.measure(latency, free, at)
	case nFree > minFree:
		// The slowest job-free probe is left out as the mean's slowest is.
		f.base, f.baseAt = max((freeSum-slowestFree)/float64(nFree-1), baselineFloor), at
		f.tailBase = max(slowestFifth(freeLats), baselineFloor)
	case nFree == minFree:
		f.base, f.baseAt = max(freeSum/float64(nFree), baselineFloor), at
		f.tailBase = max(slowestFifth(freeLats), baselineFloor)
	}
	base := f.baseline(at)
	if base > 0 && !f.known {
		// The warm-up's readings do not weigh on the first ratios.
		f.smooth = ewma{tau: f.smooth.tau}
	}
	f.known = base > 0
	out := []Sample{{Name: ForegroundLatencySeconds, Value: mean, Raw: latency, Unit: UnitSeconds, At: at}}
	if base == 0 && f.held {
		err := fmt.Errorf("%w: measuring it with the jobs held: %d of %d job-free probes in a row (%d more to let what the jobs left behind settle first; %s so far)",
			ErrBaselineWarmup, f.runN, heldProbes, f.skip, at.Sub(f.first).Round(time.Second))
		return append(out, failed(ForegroundLatency, nil, UnitRatio, at, err))
	}
	if base == 0 {
		err := fmt.Errorf("%w: waiting for %d probes with no job session at work within %s (%d now; %s so far)",
			ErrBaselineWarmup, minFree, compareSpan, nFree, at.Sub(f.first).Round(time.Second))
		return append(out, failed(ForegroundLatency, nil, UnitRatio, at, err))
	}
	ratio := mean / base
	if f.tail && f.tailBase > 0 {
		ratio = slowestFifth(lats) / f.tailBase
	}
	if !seen {
		ratio = 1
	}
	return append(out, Sample{Name: ForegroundLatency, Value: f.smooth.add(ratio, at), Raw: ratio, Unit: UnitRatio, At: at})
}

// Measuring with the jobs held (Config.ForegroundLatencyHeldBaseline).
const (
	// heldProbes is how many job-free probes in a row measure the
	// baseline: twice minFree, as they stand in for a whole window.
	heldProbes = 2 * minFree
	// settleProbes are the probes passed over when the baseline expires,
	// before heldProbes count: the jobs' last batches leave WAL to send
	// and replay and buffers to write for a while after the hold starts.
	settleProbes = minFree
)

// measure takes one probe into the held baseline's measurement while the
// baseline is unknown: a probe that saw a job at work starts the run
// again (the jobs are not held yet, or not all of them).
func (f *foreground) measure(latency float64, free bool, at time.Time) {
	if f.baseline(at) > 0 {
		return
	}
	if f.base > 0 {
		// It expired: the jobs worked until now.
		f.base, f.tailBase, f.runN, f.runSum, f.runLats, f.skip = 0, 0, 0, 0, f.runLats[:0], settleProbes
	}
	switch {
	case !free:
		f.runN, f.runSum, f.runLats, f.skip = 0, 0, f.runLats[:0], max(f.skip, settleProbes)
	case f.skip > 0:
		f.skip--
	default:
		f.runN, f.runSum = f.runN+1, f.runSum+latency
		if f.tail {
			f.runLats = append(f.runLats, latency)
		}
	}
	if f.runN >= heldProbes {
		f.base, f.baseAt = max(f.runSum/float64(f.runN), baselineFloor), at
		if f.tail {
			f.tailBase = max(slowestFifth(f.runLats), baselineFloor)
		}
		f.runN, f.runSum, f.runLats = 0, 0, f.runLats[:0]
	}
}

// slowestFifth is the mean of the slowest fifth of lats (at least two of
// them, or the one there is); 0 for none. It sorts lats in place.
//
// Why a tail: the foreground's p99 moves with the few transactions that
// meet a batch's burst, which moves a mean of forty probes little. In the
// replay's probe blocks (docs/replay/probe, windows of 2 s), a fixed rate
// that took quiet's p99 to 1.83 times foreground alone's moved the
// probes' mean 1.04 times and their slowest fifth 1.12 times; unthrottled
// (p99 2.61) 1.09 and 1.26 times. Against the a/a windows' spread the
// slowest fifth read unthrottled 4.7 standard deviations off, the mean
// 1.2; in write-heavy 6.4 against 3.9; in surge 2.1 against 2.6.
func slowestFifth(lats []float64) float64 {
	n := len(lats)
	if n == 0 {
		return 0
	}
	slices.Sort(lats)
	k := min(n, max(2, (n+4)/5))
	var sum float64
	for _, v := range lats[n-k:] {
		sum += v
	}
	return sum / float64(k)
}

// baseline is the last baseline measured, while it is no older than the
// window; 0 otherwise.
func (f *foreground) baseline(at time.Time) float64 {
	if f.base == 0 || at.Sub(f.baseAt) > f.window {
		return 0
	}
	return f.base
}

// failed returns the samples of a failed probe. A failure forgets the
// probes, so the ratio after it comes from new ones only; the baseline
// measured stays.
func (f *foreground) failed(at time.Time, err error) []Sample {
	if f.first.IsZero() {
		f.first = at
	}
	f.probes = f.probes[:0]
	f.runN, f.runSum = 0, 0
	return []Sample{
		failed(ForegroundLatencySeconds, nil, UnitSeconds, at, err),
		failed(ForegroundLatency, nil, UnitRatio, at, err),
	}
}

// minWindowProbes is the fewest probes Config.ForegroundLatencyWindow
// must hold.
const minWindowProbes = 20
