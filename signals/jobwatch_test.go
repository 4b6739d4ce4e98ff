package signals

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// The jobs' watch, round by round at fixed instants: job sessions, a
// failed round, a gap nobody watched and Config.Work each end a job-free
// stretch.
func TestJobWatchCountsEveryMeansOfWork(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var work time.Time
	p := &Poller{cfg: Config{MaxAge: 3 * time.Second, Work: func() time.Time { return work }}}
	round := func(at time.Time, sessions float64, err error) {
		p.watchJobs([]Sample{{Name: PrimaryJobSessions, At: at, Raw: sessions, Err: err}})
	}
	const d = 5 * time.Second
	for i := range 11 {
		round(t0.Add(time.Duration(i)*time.Second), 0, nil)
	}
	if !p.jobWatch().idle(t0.Add(10*time.Second), d) {
		t.Fatal("ten seconds watched with no job session: want job-free")
	}
	// A job session at 11 s.
	round(t0.Add(11*time.Second), 1, nil)
	if p.jobWatch().idle(t0.Add(15*time.Second), d) {
		t.Fatal("a job session 4 s before: want not job-free")
	}
	if !p.jobWatch().idle(t0.Add(17*time.Second), d) {
		t.Fatal("the last job session 6 s before, watched since: want job-free")
	}
	// A failed round at 12 s could not tell.
	round(t0.Add(12*time.Second), 0, errors.New("timeout"))
	if p.jobWatch().idle(t0.Add(17*time.Second), d) {
		t.Fatal("a failed round 5 s before: want not job-free")
	}
	// The sampler stops from 12 s to 40 s (a leader that stepped down,
	// a hung round): the time nobody watched is not job-free.
	round(t0.Add(40*time.Second), 0, nil)
	if p.jobWatch().idle(t0.Add(42*time.Second), d) {
		t.Fatal("28 s unwatched, sampling again for 2 s: want not job-free")
	}
	for i := 41; i <= 46; i++ {
		round(t0.Add(time.Duration(i)*time.Second), 0, nil)
	}
	if !p.jobWatch().idle(t0.Add(46*time.Second), d) {
		t.Fatal("6 s watched again with no job: want job-free")
	}
	// Work this process knows of (a batch in flight, a token out) that no
	// session shows.
	work = t0.Add(45 * time.Second)
	if p.jobWatch().idle(t0.Add(46*time.Second), d) {
		t.Fatal("Config.Work says a job worked 1 s before: want not job-free")
	}
}

// A Poller that samples again after it stopped (a sidecar leading again
// after another led) starts its watch over: the time it did not run is
// never job-free.
func TestJobWatchStartsOverWhenSamplingRestarts(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	const d = 3 * time.Second
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	stop := run()
	pgtest.Eventually(t, 30*time.Second, func() error {
		if !p.jobWatch().idle(time.Now(), d) {
			return errors.New("not yet watched for 3 s with no job session")
		}
		return nil
	})
	stop()
	restarted := time.Now()
	stop = run()
	defer stop()
	pgtest.Eventually(t, 30*time.Second, func() error {
		if !p.jobWatch().last.After(restarted) {
			return errors.New("no primary round since the restart yet")
		}
		return nil
	})
	if w := p.jobWatch(); w.idle(time.Now(), d) && time.Since(restarted) < d {
		t.Fatalf("watch %+v reads job-free %s after sampling restarted; want the 3 s before it unwatched", w, time.Since(restarted).Round(time.Millisecond))
	}
}
