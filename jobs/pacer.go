package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pacer hands out permission to start one batch attempt. The pacers
// throttled.Client (a JobPacer) and the sidecar's remote client (a
// remote.WorkerPacer) hand out satisfy it; so does anything with the same
// method, and River's middleware (package jobs/riverpace) paces through
// it too. done must be called once when the attempt ends, with its rows,
// duration and error: that feedback is how the controller learns what a
// batch costs.
type Pacer interface {
	Wait(ctx context.Context) (done func(rows int64, took time.Duration, err error), err error)
}

// Allower is a Pacer that can also grant without waiting.
type Allower interface {
	Allow() (done func(rows int64, took time.Duration, err error), ok bool)
}

// Stretcher is a Pacer that knows how stretched the foreground is: its
// latency over the most it may be (above 1: slower than it may be), the
// time of the sample that says so, and false when it is not measured. The
// batch size then answers to it too: a batch that stretches the
// foreground is too big, however short it is itself; and above 1 the
// target batch duration shrinks as under a latency signal that binds
// (see [Config.TargetBatchDuration]).
type Stretcher interface {
	ForegroundStretch() (stretch float64, at time.Time, ok bool)
}

// BatchBounder is a Pacer that knows the job's batch bounds from
// elsewhere: a remote worker's pacer learns them from the sidecar's
// configuration with each token. ok is false until it knows them. Each
// bound that is set (not 0) replaces the job's own [Config] value for the
// batches that follow; when the two sizes cross, the one that was set
// wins.
type BatchBounder interface {
	BatchBounds() (minSize, maxSize int, target time.Duration, ok bool)
}

// Progresser is a Pacer that takes each batch's details with its report:
// the done function WaitProgress returns gets them too, so they travel
// with their own batch however many workers share the pacer. Run uses it
// instead of Wait when the pacer has it; the remote pacer forwards the
// details to the sidecar, whose metrics and dashboards show them.
type Progresser interface {
	WaitProgress(ctx context.Context) (done func(rows int64, took time.Duration, err error, p Progress), err error)
}

// Progress is one batch's details for a [Progresser].
type Progress struct {
	// BatchSize is the size the batch was asked to process.
	BatchSize int
	// Attempt is 1 for a first attempt, more for a retry.
	Attempt int
	// Remaining is the rows still to do after this batch, by
	// Config.Total; -1 when the job has no Total.
	Remaining int64
}

// DB starts transactions: *pgxpool.Pool, *pgx.Conn and pgx.Tx all do.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}
