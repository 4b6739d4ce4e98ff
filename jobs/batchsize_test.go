package jobs_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// scriptedPacer grants batches at the rate its script gives for the time
// since it started, on the bubble's clock, and says what the script
// says a controller decided then: the job's status and, when stretch is
// set, the foreground's stretch (one sample a second).
type scriptedPacer struct {
	start   time.Time
	status  func(since time.Duration) status.JobStatus
	stretch func(since time.Duration) float64

	mu   sync.Mutex
	last time.Time // the last grant
}

func (p *scriptedPacer) Wait(ctx context.Context) (func(int64, time.Duration, error), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		// The rate is read again as time passes: a cut budget that grows
		// back lets a waiting batch start sooner.
		r := p.status(time.Since(p.start)).Rate
		due := p.last.Add(time.Duration(float64(time.Second) / r))
		if !time.Now().Before(due) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(time.Until(due), 100*time.Millisecond)):
		}
	}
	p.last = time.Now()
	return func(int64, time.Duration, error) {}, nil
}

func (p *scriptedPacer) Status() status.JobStatus { return p.status(time.Since(p.start)) }

// scriptedStretcher is a scriptedPacer that knows the foreground's
// stretch.
type scriptedStretcher struct{ *scriptedPacer }

func (p scriptedStretcher) ForegroundStretch() (float64, time.Time, bool) {
	since := time.Since(p.start)
	return p.stretch(since), p.start.Add(since.Truncate(time.Second)), true
}

// batchRun is one batch of a scripted run: when it started (since the
// pacer's start), how long it took, and the job's rate then.
type batchRun struct {
	at, took time.Duration
	rate     float64
}

func (b batchRun) String() string {
	return fmt.Sprintf("%.1fs: %s at %.3g/s", b.at.Seconds(), b.took.Round(time.Millisecond), b.rate)
}

// The script of TestBatchesShrinkWhileALatencySignalBinds: a healthy
// start at 10 batches/s; from 20 s a signal over its target, the rate cut
// by half at once and every 2 s (the most an ordinary cut takes, as often
// as the controller cuts while the pressure does not rise) down to its
// least, 0.01/s, at 38 s; from 40 s the signal near its target (binding,
// the budget growing as it allows) at 2 batches/s; from 90 s nothing
// binds, at 10/s again.
const (
	overFrom, rateAtMinimum, nearFrom, clearFrom = 20 * time.Second, 38 * time.Second, 40 * time.Second, 90 * time.Second
	leastRate                                    = 0.01
)

func scriptedStatus(binding status.Binding) func(time.Duration) status.JobStatus {
	return func(since time.Duration) status.JobStatus {
		switch {
		case since < overFrom:
			return status.JobStatus{Job: "shrink", State: status.JobRunning, Code: status.CodeRunning, Rate: 10}
		case since < nearFrom:
			code := status.CodeCut
			if since >= overFrom+6*time.Second {
				code = status.CodeHolding
			}
			r := max(leastRate, 10*math.Pow(0.5, float64(1+(since-overFrom)/(2*time.Second))))
			return status.JobStatus{Job: "shrink", State: status.JobThrottled, Code: code, Binding: binding, Rate: r}
		case since < clearFrom:
			return status.JobStatus{Job: "shrink", State: status.JobRunning, Code: status.CodeBinding, Binding: binding, Rate: 2}
		}
		return status.JobStatus{Job: "shrink", State: status.JobRunning, Code: status.CodeSlowStart, Rate: 10}
	}
}

// memTx is a transaction that does nothing: the batches of a scripted
// run cost only the time they sleep on the bubble's clock.
type memTx struct{ pgx.Tx }

func (memTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}
func (memTx) Commit(context.Context) error   { return nil }
func (memTx) Rollback(context.Context) error { return nil }

type memDB struct{}

func (memDB) Begin(context.Context) (pgx.Tx, error) { return memTx{}, nil }

// runScripted runs a job whose every row costs 1 ms, paced and told by
// p, for 400 s of the bubble's clock, and returns each batch.
func runScripted(t *testing.T, p jobs.Pacer, start time.Time) []batchRun {
	t.Helper()
	ex := p.(status.Explainer)
	var runs []batchRun
	j, err := jobs.New(jobs.Config{Name: "shrink", InitialBatchSize: 1000, MaxBatchSize: 100000}, memDB{}, p,
		func(_ context.Context, _ pgx.Tx, b jobs.Batch) (jobs.Result, error) {
			r := batchRun{at: time.Since(start), took: time.Duration(b.Size) * time.Millisecond, rate: ex.Status().Rate}
			time.Sleep(r.took)
			runs = append(runs, r)
			return jobs.Result{Rows: int64(b.Size), Done: time.Since(start) >= 400*time.Second}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return runs
}

// between are the batches that started in [from, to).
func between(runs []batchRun, from, to time.Duration) []batchRun {
	var out []batchRun
	for _, b := range runs {
		if b.at >= from && b.at < to {
			out = append(out, b)
		}
	}
	return out
}

// While a signal of the foreground's latency binds the job (the canary's
// foreground_latency, or the application's own p99 from Prometheus), its
// batches shrink toward the floor (50 ms) before the cut rate reaches its
// least, stay there while the signal stays near its target, and grow
// back, a doubling at a time, once it clears. A budget that primary_load
// binds cuts the rate alone, as before: the batches keep their 1 s.
//
// The story: with an application's p99 binding, the budget sat at 0.1
// batches/s, and each batch of 10,000 rows, sized toward the 1 s target,
// stalled the foreground for 50-135 ms: one batch owned a 10 s p99.
func TestBatchesShrinkWhileALatencySignalBinds(t *testing.T) {
	const floor = 60 * time.Millisecond // 50 ms, with room for the size's rounding
	for _, tc := range []struct {
		name    string
		binding status.Binding
		stretch func(time.Duration) float64 // nil: the pacer is no Stretcher
		shrinks bool
	}{
		{name: "foreground_latency", binding: status.Binding{Signal: signals.ForegroundLatency}, shrinks: true},
		{name: "prometheus signal", binding: status.Binding{Signal: "app_p99"}, shrinks: true},
		{name: "foreground stretched while primary_load binds", binding: status.Binding{Signal: signals.PrimaryLoad}, shrinks: true,
			stretch: func(since time.Duration) float64 {
				switch {
				case since >= overFrom && since < nearFrom:
					return 1.5
				case since >= nearFrom && since < clearFrom:
					return 0.9
				}
				return 0.3
			}},
		{name: "primary_load", binding: status.Binding{Signal: signals.PrimaryLoad}},
		{name: "replica_lag_seconds", binding: status.Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "r1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sp := &scriptedPacer{start: time.Now(), status: scriptedStatus(tc.binding), stretch: tc.stretch}
				var p jobs.Pacer = sp
				if tc.stretch != nil {
					p = scriptedStretcher{sp}
				}
				runs := runScripted(t, p, sp.start)
				if !tc.shrinks {
					for _, b := range runs {
						if b.took < 900*time.Millisecond {
							t.Fatalf("batch at %s: %s binds, no latency signal; want the batches' 1 s kept, the rate alone cut; batches %v", b, tc.binding, between(runs, overFrom, clearFrom))
						}
					}
					return
				}
				var first *batchRun
				for i, b := range runs {
					if b.at >= overFrom && b.took <= floor {
						first = &runs[i]
						break
					}
				}
				switch {
				case first == nil:
					t.Fatalf("no batch of at most %s while %s binds; batches then %v", floor, tc.binding, between(runs, overFrom, clearFrom))
				case first.at >= rateAtMinimum || first.rate <= leastRate:
					t.Fatalf("first batch at the floor: %s; want it before the rate is cut to its least (%.2g/s, at %s); batches %v", first, leastRate, rateAtMinimum, between(runs, overFrom, nearFrom+time.Second))
				}
				for _, b := range runs {
					switch {
					case b.at >= nearFrom && b.at < clearFrom+20*time.Second && b.took > floor:
						t.Fatalf("batch at %s: want the floor kept while the signal is near its target, and for a while once it clears; batches %v",
							b, between(runs, clearFrom-2*time.Second, clearFrom+20*time.Second))
					case b.at >= 300*time.Second && b.took < 800*time.Millisecond:
						t.Fatalf("batch at %s: want the batches back to about 1 s within 210 s of the signal clearing; batches %v", b, between(runs, clearFrom, 300*time.Second))
					}
				}
			})
		})
	}
}
