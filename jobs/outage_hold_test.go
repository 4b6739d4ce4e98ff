package jobs_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/jobs"
)

// flakyDB refuses the first down Begins as a dead server would and then
// answers with a transaction that only rolls back.
type flakyDB struct {
	down   int64
	begins atomic.Int64
}

func (d *flakyDB) Begin(context.Context) (pgx.Tx, error) {
	if d.begins.Add(1) <= d.down {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	}
	return rollbackTx{}, nil
}

// rollbackTx is a transaction the probe only rolls back.
type rollbackTx struct{ pgx.Tx }

func (rollbackTx) Rollback(context.Context) error { return nil }

// holdAfter grants free tokens and then holds every later wait until its
// context ends, as a coordinated pacer does when its own database is
// unreachable too, or while an operator's pause lasts.
type holdAfter struct {
	free  int64
	waits atomic.Int64
}

func (p *holdAfter) Wait(ctx context.Context) (func(int64, time.Duration, error), error) {
	if p.waits.Add(1) <= p.free {
		return func(int64, time.Duration, error) {}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func noBatch(context.Context, pgx.Tx, jobs.Batch) (jobs.Result, error) {
	return jobs.Result{}, errors.New("the batch function ran without a database")
}

// A pacer that holds the job while its database is down must not hold it
// past MaxOutage: the job probes the database then and, still
// unreachable, fails with the outage named. Before, Run waited on the
// pacer forever.
func TestAnOutageWhileThePacerHoldsTheJobStillEndsAtMaxOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &flakyDB{down: 1 << 30}
		j, err := jobs.New(jobs.Config{Name: "held", MaxOutage: time.Minute}, db, &holdAfter{free: 1}, noBatch)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = j.Run(context.Background())
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "database unreachable for 1m0s") || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("Run: %v; want the outage named after MaxOutage", err)
		}
		// The outage opened with the failed batch at 0, so the last
		// probe falls exactly at MaxOutage.
		if took != time.Minute {
			t.Fatalf("gave up after %s; want at MaxOutage (1m)", took)
		}
		if n := db.begins.Load(); n < 2 {
			t.Fatalf("%d Begins; want the failed batch and at least one probe", n)
		}
	})
}

// A pacer that holds the job from the start, because it lost the
// database before any batch ran, is probed too: the outage opens at the
// first probe that fails and ends the job MaxOutage later.
func TestAnOutageBeforeTheFirstBatchEndsAtMaxOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &flakyDB{down: 1 << 30}
		j, err := jobs.New(jobs.Config{Name: "held-from-start", MaxOutage: time.Minute}, db, &holdAfter{}, noBatch)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = j.Run(context.Background())
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "database unreachable for 1m0s") {
			t.Fatalf("Run: %v; want the outage named after MaxOutage", err)
		}
		// The first probe comes within 30s of a hold.
		if took < time.Minute || took > time.Minute+30*time.Second {
			t.Fatalf("gave up after %s; want between MaxOutage and 30s after it", took)
		}
	})
}

// A database that answers the probe ends the outage: the pacer's hold is
// then a pause, and the job waits it out however long it lasts instead
// of failing as unreachable.
func TestAPauseThatOutlastsAnOutageIsNotAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &flakyDB{down: 1}
		j, err := jobs.New(jobs.Config{Name: "paused", MaxOutage: time.Minute}, db, &holdAfter{free: 1}, noBatch)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err = j.Run(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("Run: %v; want it held until its context ended, an hour later", err)
		}
		// Probes go on while the pause lasts, at most one every 30s,
		// each one transaction begun and rolled back.
		if n := db.begins.Load(); n < 3 || n > 1+int64(time.Hour/(15*time.Second)) {
			t.Fatalf("%d Begins in an hour's pause; want the failed batch and a probe every 15s to 30s", n)
		}
	})
}
