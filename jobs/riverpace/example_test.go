package riverpace_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/jobs/riverpace"
)

// Pace one kind of River job: while paused its jobs are snoozed (the
// worker slot freed, no attempt burned); otherwise each waits for its
// pacer and reports back.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db1/app")
	if err != nil {
		log.Fatal(err)
	}
	c, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: "postgres://monitor@db1/app", Cores: 16})
	if err != nil {
		log.Fatal(err)
	}
	pacer, err := c.Pacer(jobs.Config{Name: "river_email"})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := riverpace.New(riverpace.Config{PacerFor: func(job *rivertype.JobRow) jobs.Pacer {
		if job.Kind == "email" {
			return pacer
		}
		return nil // other kinds run unpaced
	}})
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	// river.AddWorker(workers, &EmailWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Workers:    workers,
		Middleware: []rivertype.Middleware{mw},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = client.Start(ctx)

	// Holds over an hour pause the queue in River (every client stops
	// fetching it) instead of snoozing each job; the hold's end resumes it.
	guard, err := riverpace.NewQueueGuard(riverpace.QueueGuardConfig{Client: client, Queue: river.QueueDefault, Pacer: pacer, Threshold: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	go guard.Run(ctx)
}
