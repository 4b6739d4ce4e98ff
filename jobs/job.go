package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/jobname"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/wait"
	"github.com/throttled/throttled/status"
)

// Batch is what a batch function is asked to do.
type Batch struct {
	// Size is the most rows the batch should touch.
	Size int
	// Position is the checkpoint the last committed batch left ("" at
	// the start): for example the last key processed.
	Position string
	// Attempt is 1 for a first attempt, 2 for the first retry, ...
	Attempt int
}

// Result is what one batch did.
type Result struct {
	// Rows the batch processed.
	Rows int64
	// Position is the new checkpoint; "" keeps the previous one.
	Position string
	// Done ends the job after this batch commits.
	Done bool
}

// BatchFunc processes one batch inside tx, which runs under the job's
// statement timeout and carries its application_name. It must not commit
// or roll back tx.
type BatchFunc func(ctx context.Context, tx pgx.Tx, b Batch) (Result, error)

// Job runs a batch function under a pacer. Create it with [New]; call
// [Job.Run] once. [Job.Status] is safe to call at any time from any
// goroutine.
type Job struct {
	cfg   Config
	db    DB
	pacer Pacer
	fn    BatchFunc
	log   hclog.Logger
	rnd   func(int64) int64

	mu     sync.Mutex
	status Status
	sizer  sizer
	rowsPS float64 // smoothed rows per second, for the ETA
	ran    bool
}

// New validates cfg (see [Config.Validate]) and returns a Job. db may be
// nil for a job driven only through [Job.Acquire].
func New(cfg Config, db DB, pacer Pacer, fn BatchFunc) (*Job, error) {
	cfg = cfg.withDefaults()
	errs := cfg.problems()
	if pacer == nil {
		errs = append(errs, fmt.Errorf("jobs: job %q: a Pacer is required", cfg.Name))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	j := &Job{cfg: cfg, db: db, pacer: pacer, fn: fn, log: cfg.Logger.With("job", cfg.Name), rnd: randInt64N}
	j.sizer = sizer{size: cfg.InitialBatchSize, min: cfg.MinBatchSize, max: cfg.MaxBatchSize, target: cfg.TargetBatchDuration}
	j.status = Status{Job: cfg.Name, State: StateRunning, BatchSize: cfg.InitialBatchSize, TargetBatchDuration: cfg.TargetBatchDuration, Total: cfg.Total}
	return j, nil
}

// Name is the job's name.
func (j *Job) Name() string { return j.cfg.Name }

// Config returns the job's configuration with defaults filled in.
func (j *Job) Config() Config { return j.cfg }

// AppName is the application_name the job's sessions carry.
func AppName(job string) string { return jobname.AppPrefix + job }

// Run processes batches until the batch function reports Done, a batch
// fails for good, or ctx ends. Each batch waits for the pacer, runs in
// its own transaction under the statement timeout, and reports back.
// Retryable errors are retried with full-jitter backoff, at most
// MaxAttempts times a batch and only while the retry budget allows; every
// attempt waits for the pacer like a first one, so retries never exceed
// the job's allocation. A batch that cannot begin because the database is
// unreachable ([Unreachable]) is retried the same way for up to MaxOutage
// instead, spending neither. When ctx ends, a batch in flight still finishes
// and commits (bounded by the statement timeout), and no new one starts.
// Run returns nil when done, ctx's error when ctx ended, or the batch's
// error.
func (j *Job) Run(ctx context.Context) error {
	j.mu.Lock()
	if j.ran {
		j.mu.Unlock()
		return fmt.Errorf("jobs: job %q: Run called twice", j.cfg.Name)
	}
	j.ran = true
	j.mu.Unlock()
	if j.db == nil || j.fn == nil {
		return j.finish(fmt.Errorf("jobs: job %q: Run needs a DB and a BatchFunc", j.cfg.Name))
	}
	position := ""
	if j.cfg.Checkpoint {
		var err error
		if position, err = j.loadCheckpoint(ctx); err != nil {
			return j.finish(err)
		}
	}
	budget := newRetryBudget()
	attempt := 1
	var outage outageStreak
	for {
		done, err := j.waitOutage(ctx, &outage)
		if err != nil {
			return j.finish(err)
		}
		size := j.batchSize()
		start := time.Now()
		// A batch that has started finishes even if ctx ends meanwhile:
		// its statements are bounded by the statement timeout and the
		// whole batch by batchDeadline, and stopping between batches
		// leaves nothing half-done to explain.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.batchDeadline())
		res, err := j.runBatch(bctx, Batch{Size: size, Position: position, Attempt: attempt})
		cancel()
		took := time.Since(start)
		done(res.Rows, took, err, j.progress(size, attempt, res, err))
		if err == nil {
			budget.success()
			attempt = 1
			outage = outageStreak{}
			if res.Position != "" {
				position = res.Position
			}
			j.succeeded(res, took)
			if res.Done {
				j.log.Info("job done", "rows", j.Status().Rows, "batches", j.Status().Batches)
				return j.finish(nil)
			}
			if ctx.Err() != nil {
				return j.finish(ctx.Err())
			}
			continue
		}
		j.failed(err)
		if ctx.Err() != nil {
			return j.finish(ctx.Err())
		}
		if errors.As(err, new(beforeBatch)) && Unreachable(err) {
			// An outage, not a failing batch: bounded by time, not
			// by attempts. Only before the batch ran: a batch that
			// loses its server midway (it may have crashed it) is an
			// attempt like any other.
			n, since := outage.failed(time.Now())
			if since > j.cfg.MaxOutage {
				return j.finish(j.outageError(since, err))
			}
			pause := backoff(n, j.cfg.RetryBackoff, j.cfg.MaxRetryBackoff, j.rnd)
			j.log.Warn("database unreachable; retrying", "error", err, "for", since.Round(time.Millisecond), "backoff", pause)
			if err := wait.For(ctx, pause); err != nil {
				return j.finish(err)
			}
			continue
		}
		outage = outageStreak{}
		budget.failure()
		switch {
		case !Retryable(err):
			return j.finish(fmt.Errorf("jobs: job %q: batch failed (not retryable): %w", j.cfg.Name, err))
		case attempt >= j.cfg.MaxAttempts:
			return j.finish(fmt.Errorf("jobs: job %q: batch failed after %d attempts: %w", j.cfg.Name, attempt, err))
		case !budget.allow():
			return j.finish(fmt.Errorf("jobs: job %q: retry budget exhausted (too many recent failures): %w", j.cfg.Name, err))
		}
		attempt++
		pause := backoff(attempt-1, j.cfg.RetryBackoff, j.cfg.MaxRetryBackoff, j.rnd)
		j.log.Warn("batch failed; retrying", "error", err, "attempt", attempt, "backoff", pause)
		if err := wait.For(ctx, pause); err != nil {
			return j.finish(err)
		}
	}
}

// outageError ends a job whose database stayed unreachable too long.
func (j *Job) outageError(since time.Duration, err error) error {
	return fmt.Errorf("jobs: job %q: database unreachable for %s (MaxOutage %s): %w", j.cfg.Name, since.Round(time.Second), j.cfg.MaxOutage, err)
}

// waitOutage is wait, with an eye on the job's database. The pacer may
// hold the job while that database is unreachable (a coordinated pacer
// keeps its leases there, loses them with it and fails closed), and a
// job held forever would never learn that MaxOutage has passed. So a
// wait that lasts longer than a quarter of MaxOutage (1-30s), or past
// the end of an open outage's MaxOutage, is interrupted by a probe: a
// database that answers ends the outage, and the wait goes on for as
// long as the pacer holds (a pause is not an outage); one that does not
// opens or extends the outage, which ends the job once it has lasted
// MaxOutage.
func (j *Job) waitOutage(ctx context.Context, outage *outageStreak) (func(int64, time.Duration, error, Progress), error) {
	every := min(max(j.cfg.MaxOutage/4, time.Second), 30*time.Second)
	for {
		d := every
		if outage.n > 0 {
			d = min(d, time.Until(outage.first.Add(j.cfg.MaxOutage)))
		}
		wctx, cancel := context.WithTimeout(ctx, d)
		done, err := j.wait(wctx)
		cancel()
		if err == nil || ctx.Err() != nil || wctx.Err() == nil {
			return done, err
		}
		down, err := j.probe(ctx)
		if !down {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			*outage = outageStreak{}
			continue
		}
		_, since := outage.failed(time.Now())
		if since >= j.cfg.MaxOutage {
			return nil, j.outageError(since, err)
		}
		j.log.Warn("database unreachable while the job waits; probing again", "error", err, "for", since.Round(time.Millisecond))
	}
}

// Pinger is a DB that can ask its database whether it answers without a
// transaction, as *pgxpool.Pool and *pgx.Conn do.
type Pinger interface {
	Ping(ctx context.Context) error
}

// probe asks the job's database whether it answers, bounded by probeWait:
// a ping where the DB can (see [Pinger]), else a transaction begun and
// rolled back. down is true, with the reason, when it cannot be reached or
// does not answer in time; any other error is an answer.
//
// A ping, because the primary's canary tells the users' sessions from
// throttled's by what they did last (signals.PingQuery): a session that
// begins and rolls back a transaction looks like a user's for two seconds,
// and a job paused for long probes every 30 s, on a pooled connection no
// batch has named as the job's.
func (j *Job) probe(ctx context.Context) (down bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	if p, ok := j.db.(Pinger); ok {
		err = p.Ping(pctx)
	} else if tx, berr := j.db.Begin(pctx); berr != nil {
		err = berr
	} else {
		rollback(pctx, tx)
	}
	if err == nil {
		return false, nil
	}
	if ctx.Err() == nil && pctx.Err() != nil {
		return true, fmt.Errorf("no answer within %s: %w", probeWait, err)
	}
	return Unreachable(err), err
}

// probeWait bounds a probe of the job's database.
const probeWait = 10 * time.Second

// wait takes a token, through WaitProgress when the pacer has it.
func (j *Job) wait(ctx context.Context) (func(int64, time.Duration, error, Progress), error) {
	if p, ok := j.pacer.(Progresser); ok {
		return p.WaitProgress(ctx)
	}
	done, err := j.pacer.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return func(rows int64, took time.Duration, err error, _ Progress) { done(rows, took, err) }, nil
}

// progress describes the batch just run for a Progresser.
func (j *Job) progress(size, attempt int, res Result, err error) Progress {
	p := Progress{BatchSize: size, Attempt: attempt, Remaining: -1}
	if st := j.Status(); st.Total > 0 {
		total, rows := st.Total, st.Rows
		if err == nil {
			rows = addRows(rows, res.Rows)
		}
		p.Remaining = max(0, total-rows)
	}
	return p
}

// addRows adds a batch's rows to a running total, saturating at
// math.MaxInt64 and ignoring a negative count: the rows counter
// (throttled_jobs_rows_total) never goes backwards, whatever a batch
// function or a Ticket reports.
func addRows(total, n int64) int64 {
	if n <= 0 {
		return total
	}
	if total > math.MaxInt64-n {
		return math.MaxInt64
	}
	return total + n
}

// rollback ends tx if it is still open (after a commit it is a no-op),
// even when ctx has ended, and never for more than rollbackWait: a hung
// primary must not hold the job forever after a failed batch.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackWait)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// rollbackWait bounds a rollback.
const rollbackWait = 5 * time.Second

// batchDeadline bounds a whole batch: its statements (each bounded by the
// statement timeout) plus begin and commit.
func (j *Job) batchDeadline() time.Duration { return 4*j.cfg.StatementTimeout + 5*time.Second }

// runBatch runs one batch in its own transaction, with the checkpoint
// written in the same transaction.
func (j *Job) runBatch(ctx context.Context, b Batch) (Result, error) {
	tx, err := j.db.Begin(ctx)
	if err != nil {
		return Result{}, beforeBatch{fmt.Errorf("begin: %w", err)}
	}
	// Rolling back after a commit is a no-op; after a cancel it must not
	// wait on the cancelled context.
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true), set_config('application_name', $2, true)",
		strconv.FormatInt(j.cfg.StatementTimeout.Milliseconds(), 10), AppName(j.cfg.Name)); err != nil {
		return Result{}, beforeBatch{fmt.Errorf("set statement_timeout: %w", err)}
	}
	res, err := j.fn(ctx, tx, b)
	if err != nil {
		return Result{}, err
	}
	if j.cfg.Checkpoint {
		if _, err := tx.Exec(ctx, `UPDATE `+schema.Name+`.checkpoints
			SET position = COALESCE(NULLIF($2, ''), position), batches = batches + 1, rows = rows + $3,
			    updated_at = now(), done_at = CASE WHEN $4 THEN now() END
			WHERE job = $1`, j.cfg.Name, res.Position, res.Rows, res.Done); err != nil {
			return Result{}, fmt.Errorf("write checkpoint: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("commit: %w", err)
	}
	return res, nil
}

// loadCheckpoint creates the checkpoint table if needed and returns the
// position to resume from. A job whose last run finished starts afresh.
func (j *Job) loadCheckpoint(ctx context.Context) (string, error) {
	// Bounded like a batch: a hung primary fails the start with an error
	// instead of leaving Run waiting while Status says running.
	ctx, cancel := context.WithTimeout(ctx, j.batchDeadline())
	defer cancel()
	if _, err := schema.Migrate(ctx, j.db); err != nil {
		return "", fmt.Errorf("jobs: job %q: %w", j.cfg.Name, err)
	}
	tx, err := j.db.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("jobs: job %q: read checkpoint: %w", j.cfg.Name, err)
	}
	defer rollback(ctx, tx)
	var position *string
	var batches, rows int64
	err = tx.QueryRow(ctx, `INSERT INTO `+schema.Name+`.checkpoints AS c (job) VALUES ($1)
		ON CONFLICT (job) DO UPDATE SET
		  position   = CASE WHEN c.done_at IS NULL THEN c.position END,
		  batches    = CASE WHEN c.done_at IS NULL THEN c.batches ELSE 0 END,
		  rows       = CASE WHEN c.done_at IS NULL THEN c.rows ELSE 0 END,
		  started_at = CASE WHEN c.done_at IS NULL THEN c.started_at ELSE now() END,
		  done_at    = NULL
		RETURNING position, batches, rows`, j.cfg.Name).Scan(&position, &batches, &rows)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return "", fmt.Errorf("jobs: job %q: read checkpoint: %w", j.cfg.Name, err)
	}
	j.mu.Lock()
	j.status.Rows, j.status.Batches = rows, batches
	j.mu.Unlock()
	if position != nil {
		j.log.Info("resuming from checkpoint", "position", *position, "rows", rows, "batches", batches)
		return *position, nil
	}
	return "", nil
}

// batchSize is the size of the next batch: within the pacer's bounds when
// it has some (BatchBounder), toward a target the foreground's latency
// signals may have shrunk (see sizer.answer).
func (j *Job) batchSize() int {
	bb, isBounder := j.pacer.(BatchBounder)
	var minSize, maxSize int
	var target time.Duration
	ok := false
	if isBounder {
		minSize, maxSize, target, ok = bb.BatchBounds()
	}
	z := j.latency()
	now := time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	if ok {
		j.sizer.bound(j.cfg, minSize, maxSize, target)
	}
	j.sizer.answer(z, now)
	j.status.BatchSize, j.status.TargetBatchDuration = j.sizer.size, j.sizer.effective()
	return j.sizer.size
}

// latency is how the foreground's latency signals stand for the job, as
// its pacer says: by its status (a status.Explainer: a latency signal
// binding it, and how near its target by the code) and by the
// foreground's stretch (a Stretcher: the canary over its target, whatever
// binds), the worse of the two; unknown while the pacer pauses the job,
// or when it can say neither.
func (j *Job) latency() latencyZone {
	z := latencyUnknown
	if ex, ok := j.pacer.(status.Explainer); ok {
		if z = zoneOf(ex.Status()); z == latencyUnknown {
			return z
		}
	}
	if st, ok := j.pacer.(Stretcher); ok {
		if fg, _, ok := st.ForegroundStretch(); ok {
			z = max(z, stretchZone(fg))
		}
	}
	return z
}

func (j *Job) succeeded(res Result, took time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.status.Batches++
	j.status.Rows = addRows(j.status.Rows, res.Rows)
	var fg float64
	var fgAt time.Time
	if st, ok := j.pacer.(Stretcher); ok {
		if v, at, ok := st.ForegroundStretch(); ok {
			fg, fgAt = v, at
		}
	}
	j.status.BatchSize = j.sizer.observe(took, fg, fgAt)
	j.status.LastBatch = took
	if took > 0 {
		inst := float64(res.Rows) / took.Seconds()
		if j.rowsPS == 0 {
			j.rowsPS = inst
		} else {
			j.rowsPS += 0.2 * (inst - j.rowsPS)
		}
	}
}

func (j *Job) failed(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.status.Errors++
	j.status.LastError = err.Error()
	if statementTimeout(err) {
		j.status.BatchSize = j.sizer.timedOut()
	}
	if Retryable(err) {
		j.status.Retries++
	}
}

func (j *Job) finish(err error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case err == nil:
		j.status.State, j.status.Reason = StateDone, ""
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		j.status.State, j.status.Reason = StateStopped, err.Error()
	default:
		j.status.State, j.status.Reason = StateFailed, err.Error()
		j.log.Error("job failed", "error", err)
	}
	return err
}

// eta estimates the time to process the rest of Total at the recent rate.
func eta(total, rows int64, rowsPerSecond float64) time.Duration {
	if total <= 0 || rowsPerSecond <= 0 || rows >= total {
		return 0
	}
	s := float64(total-rows) / rowsPerSecond
	if s > math.MaxInt64/float64(time.Second) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
