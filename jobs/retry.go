package jobs

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable reports whether err is worth another attempt of the same
// batch: every [Unreachable] error, and serialization failures (40001), deadlocks (40P01), lock timeouts
// (55P03), statement timeouts (57014) and too many connections (53300).
// Constraint violations, syntax and permission
// errors, and data errors are not: retrying them only repeats them. A done
// context is never retryable.
func Retryable(err error) bool {
	if Unreachable(err) {
		return true
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03", "57014", "53300":
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// Unreachable reports whether err says the database cannot be reached
// at all, rather than that the batch failed on it: a connection that
// could not be made or was lost (class 08, a network error, EOF) or a
// server shutting down, crashed or starting up (57P01-57P03), as during a
// failover or a restart. Such errors are retryable; when a batch cannot
// begin for one of them, [Job.Run] rides it out for up to MaxOutage.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// beforeBatch wraps an error from beginning a batch's transaction,
// before the batch function ran.
type beforeBatch struct{ err error }

func (b beforeBatch) Error() string { return b.err.Error() }
func (b beforeBatch) Unwrap() error { return b.err }

// outageStreak is a run of [Unreachable] failures with no success or
// other failure between them.
type outageStreak struct {
	n     int
	first time.Time
}

// failed counts one more failure at now and returns how many there were
// and how long ago the first was.
func (o *outageStreak) failed(now time.Time) (int, time.Duration) {
	if o.n == 0 {
		o.first = now
	}
	o.n++
	return o.n, now.Sub(o.first)
}

// statementTimeout reports whether err is a statement timeout.
func statementTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// backoff is full-jitter exponential backoff: before retry n (1-based) it
// waits a uniformly random time in [0, min(max, base*2^(n-1))]. Full
// jitter spreads the retries of many workers instead of synchronising
// them.
func backoff(n int, base, max time.Duration, rnd func(int64) int64) time.Duration {
	ceiling := base << min(n-1, 30)
	if ceiling <= 0 || ceiling > max {
		ceiling = max
	}
	return time.Duration(rnd(int64(ceiling) + 1))
}

func randInt64N(n int64) int64 { return rand.Int64N(n) }

// retryBudget allows retries only while recent attempts mostly succeed,
// as gRPC's retry throttling does. It holds up to 10 tokens (kept in
// tenths, so the arithmetic is exact); a failure takes one, a success
// gives back a tenth, and retries are allowed while more than 5 remain.
// From full, five failures beyond a tenth of the successes stop retries,
// so a failing database sees each batch attempted once, not MaxAttempts
// times; ten successes earn one failure back.
type retryBudget struct {
	tenths int
}

const (
	budgetMax     = 100 // tenths of a token
	budgetFailure = 10
	budgetSuccess = 1
)

func newRetryBudget() *retryBudget { return &retryBudget{tenths: budgetMax} }

func (b *retryBudget) success()    { b.tenths = min(budgetMax, b.tenths+budgetSuccess) }
func (b *retryBudget) failure()    { b.tenths = max(0, b.tenths-budgetFailure) }
func (b *retryBudget) allow() bool { return b.tenths > budgetMax/2 }
