package riverpace_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/jobs/riverpace"
	"github.com/throttled/throttled/throttle/limit"
)

type limiterPacer struct{ l *limit.Limiter }

func (p limiterPacer) Wait(ctx context.Context) (func(int64, time.Duration, error), error) {
	release, err := p.l.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return func(int64, time.Duration, error) { release.Release() }, nil
}

// River recovers a worker's panic and carries on; the middleware still
// reports the attempt to the pacer and gives its in-flight slot back, or
// once MaxInFlight slots leaked every later job of the kind would be
// snoozed forever.
func TestPanickingJobReleasesItsPacerSlot(t *testing.T) {
	l := limit.New("panic-slot", nil)
	l.Apply(limit.Allocation{Rate: 1000, Burst: 10, MaxInFlight: 1})
	mw, err := riverpace.New(riverpace.Config{
		PacerFor: func(*rivertype.JobRow) jobs.Pacer { return limiterPacer{l} },
		MaxWait:  200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	job := &rivertype.JobRow{Kind: "email"}
	func() {
		defer func() { _ = recover() }() // as River's executor does
		_ = mw.Work(context.Background(), job, func(context.Context) error { panic("worker bug") })
	}()
	if n := l.InFlight(); n != 0 {
		t.Errorf("after a panicking job, %d in-flight slot(s) still held", n)
	}
	worked := false
	err = mw.Work(context.Background(), job, func(context.Context) error { worked = true; return nil })
	if !worked {
		t.Fatalf("next job not worked (err %v): the panicked job's slot was never released", err)
	}
}
