package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

func TestSizerConvergesToTheTargetDuration(t *testing.T) {
	// A table where each row costs 3 ms: the target of 1 s is about 333
	// rows a batch.
	s := sizer{size: 10, min: 1, max: 100000, target: time.Second}
	perRow := 3 * time.Millisecond
	var steps int
	for steps = 1; steps <= 100; steps++ {
		took := time.Duration(s.size) * perRow
		before := s.size
		s.observe(took, 0, time.Time{})
		if s.size > before && float64(s.size) > math.Ceil(float64(before)*1.2) {
			t.Fatalf("grew %d -> %d, more than 20%%", before, s.size)
		}
		if ratio := float64(time.Duration(s.size)*perRow) / float64(time.Second); ratio > 1/sizeDeadband && ratio < sizeDeadband && s.size == before {
			break
		}
	}
	if steps > 30 {
		t.Fatalf("took %d batches to converge", steps)
	}
	if took := time.Duration(s.size) * perRow; took < 800*time.Millisecond || took > 1200*time.Millisecond {
		t.Fatalf("converged at %d rows (%s a batch); want about 1 s", s.size, took)
	}
	// The table gets slow (locks, I/O): shrink at once, in proportion.
	before := s.size
	s.observe(4*time.Second, 0, time.Time{})
	if s.size != before/4 {
		t.Fatalf("a 4x too slow batch: %d -> %d; want %d", before, s.size, before/4)
	}
	s.timedOut()
	if s.size != before/8 {
		t.Fatalf("after a timeout: %d; want %d", s.size, before/8)
	}
	// Bounds hold.
	b := sizer{size: 5, min: 4, max: 6, target: time.Second}
	if b.observe(time.Microsecond, 0, time.Time{}); b.size != 6 {
		t.Fatalf("max: %d", b.size)
	}
	if b.observe(time.Hour, 0, time.Time{}); b.size != 4 {
		t.Fatalf("min: %d", b.size)
	}
	if b.timedOut(); b.size != 4 {
		t.Fatalf("min after timeout: %d", b.size)
	}
}

func TestSizerShrinksBatchesThatStretchTheForeground(t *testing.T) {
	// Each batch takes a tenth of the target: by its own duration it
	// would grow to the maximum.
	s := sizer{size: 1000, min: 10, max: 10000, target: time.Second}
	fast := 100 * time.Millisecond
	t0 := time.Date(2026, 9, 13, 0, 0, 0, 0, time.UTC)

	// A sample 1.6x over: the size shrinks in proportion, once for that
	// sample however many batches read it.
	s.observe(fast, 1.6, t0)
	if s.size != 625 {
		t.Fatalf("stretch 1.6: 1000 -> %d; want 625", s.size)
	}
	s.observe(fast, 1.6, t0)
	if s.size != 625 {
		t.Fatalf("the same sample read twice: %d; want 625 (it counts once)", s.size)
	}
	// A worse sample halves it at most.
	s.observe(fast, 5, t0.Add(time.Second))
	if s.size != 312 {
		t.Fatalf("stretch 5: 625 -> %d; want 312 (at most half)", s.size)
	}
	// Near the target (above 1/1.2) fast batches do not grow.
	for i := range 5 {
		s.observe(fast, 0.9, t0.Add(time.Duration(2+i)*time.Second))
	}
	if s.size != 312 {
		t.Fatalf("stretch 0.9: %d; want 312 (held)", s.size)
	}
	// A relaxed foreground lets the batch's own duration lead again.
	s.observe(fast, 0.5, t0.Add(10*time.Second))
	if s.size != 375 {
		t.Fatalf("stretch 0.5: 312 -> %d; want 375 (+20%%)", s.size)
	}
	// A slow batch still shrinks, stretched or not.
	s.observe(4*time.Second, 0.9, t0.Add(11*time.Second))
	if s.size != 93 {
		t.Fatalf("a 4x too slow batch at stretch 0.9: %d; want 93", s.size)
	}
	// And the floor holds.
	for i := range 10 {
		s.observe(fast, 3, t0.Add(time.Duration(20+i)*time.Second))
	}
	if s.size != 10 {
		t.Fatalf("after many stretched samples: %d; want the minimum 10", s.size)
	}
}

// The target answers to the latency zone with explicit time: halved when
// a signal is first read over its target and for every second read so
// since (counted up to the first reading that is not), never under the
// floor; held near the target or while unknown; doubled for every 30 s of
// readings that say clear. A shrunk target applies to the size at once.
func TestSizerTargetAnswersToLatency(t *testing.T) {
	t0 := time.Date(2026, 9, 13, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := sizer{size: 1000, min: 1, max: 100000, target: time.Second}
	s.observe(time.Second, 0, time.Time{}) // 1 ms a row
	s.answer(latencyClear, at(0))
	if s.effective() != time.Second || s.size != 1000 {
		t.Fatalf("clear: target %s, size %d; want 1s, 1000", s.effective(), s.size)
	}
	for _, step := range []struct {
		at     time.Duration
		z      latencyZone
		target time.Duration
		size   int
	}{
		{1 * time.Second, latencyOver, 500 * time.Millisecond, 500},         // first read over: halved, and the size with it
		{1500 * time.Millisecond, latencyOver, 500 * time.Millisecond, 500}, // half a second on: not yet
		{2 * time.Second, latencyOver, 250 * time.Millisecond, 250},
		{4 * time.Second, latencyNear, 62500 * time.Microsecond, 62},  // over until read near: two more
		{60 * time.Second, latencyNear, 62500 * time.Microsecond, 62}, // held near
		{61 * time.Second, latencyOver, LatencyFloor, 50},             // the floor
		{70 * time.Second, latencyOver, LatencyFloor, 50},             // and no further
		{71 * time.Second, latencyUnknown, LatencyFloor, 50},          // paused: held
		{200 * time.Second, latencyClear, LatencyFloor, 50},           // clear: counted from this reading
		{229 * time.Second, latencyClear, LatencyFloor, 50},
		{230 * time.Second, latencyClear, 62500 * time.Microsecond, 50}, // a doubling (from the floor's halving); the size grows by its batches
		{320 * time.Second, latencyClear, 500 * time.Millisecond, 50},
		{400 * time.Second, latencyClear, time.Second, 50}, // back to the configured target, not past it
	} {
		s.answer(step.z, at(step.at))
		if s.effective() != step.target || s.size != step.size {
			t.Fatalf("at %s, zone %d: target %s, size %d; want %s, %d", step.at, step.z, s.effective(), s.size, step.target, step.size)
		}
	}
	// A target configured under the floor is kept.
	short := sizer{size: 10, min: 1, max: 100, target: 20 * time.Millisecond}
	short.answer(latencyOver, at(0))
	short.answer(latencyOver, at(10*time.Second))
	if short.effective() != 20*time.Millisecond {
		t.Fatalf("a 20ms target under a latency signal: %s; want it kept", short.effective())
	}
	// A batch far under the shrunk target keeps its size.
	fast := sizer{size: 100, min: 1, max: 1000, target: time.Second}
	before := fast.observe(10*time.Millisecond, 0, time.Time{})
	fast.answer(latencyOver, at(0))
	if fast.size != before {
		t.Fatalf("a 10ms batch under a 500ms target: size %d; want %d kept", fast.size, before)
	}
}

// A job's status says how its latency signals stand: over while one holds
// or cuts the budget or slows the job, near while one binds under its
// target, clear when none binds, unknown while the job is paused.
func TestZoneOf(t *testing.T) {
	fg, p99, load := status.Binding{Signal: signals.ForegroundLatency}, status.Binding{Signal: "api_p99"}, status.Binding{Signal: signals.PrimaryLoad}
	for _, tc := range []struct {
		st   status.JobStatus
		want latencyZone
	}{
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeCut, Binding: fg}, latencyOver},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeHolding, Binding: p99}, latencyOver},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeTooSlow, Binding: p99}, latencyOver},
		{status.JobStatus{State: status.JobRunning, Code: status.CodeBinding, Binding: fg}, latencyNear},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeCut, Binding: load}, latencyClear},
		{status.JobStatus{State: status.JobRunning, Code: status.CodeBinding, Binding: load}, latencyClear},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeHolding, Binding: status.Binding{Signal: status.BindingErrors}}, latencyClear},
		{status.JobStatus{State: status.JobRunning, Code: status.CodeSlowStart}, latencyClear},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeNotGrowing}, latencyNear},
		{status.JobStatus{State: status.JobRunning, Code: status.CodeRunning}, latencyClear},
		{status.JobStatus{State: status.JobThrottled, Code: status.CodeScaled, Binding: p99}, latencyClear},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeStale, Binding: p99}, latencyUnknown},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeTooSlow, Binding: p99}, latencyUnknown},
		{status.JobStatus{State: status.JobPaused, Code: status.CodeHeld}, latencyUnknown},
		{status.JobStatus{}, latencyUnknown},
	} {
		if got := zoneOf(tc.st); got != tc.want {
			t.Errorf("%s/%s on %s: zone %d; want %d", tc.st.State, tc.st.Code, tc.st.Binding, got, tc.want)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "55P03"}, true},
		{&pgconn.PgError{Code: "57014"}, true},
		{&pgconn.PgError{Code: "53300"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{fmt.Errorf("batch: %w", &pgconn.PgError{Code: "40001"}), true},
		{io.ErrUnexpectedEOF, true},
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation
		{&pgconn.PgError{Code: "23503"}, false}, // foreign key
		{&pgconn.PgError{Code: "42601"}, false}, // syntax
		{&pgconn.PgError{Code: "42501"}, false}, // permission
		{&pgconn.PgError{Code: "22012"}, false}, // division by zero
		{context.Canceled, false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{errors.New("some bug"), false},
		{nil, false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

func TestBackoffIsFullJitterWithACap(t *testing.T) {
	top := func(n int64) int64 { return n - 1 }
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 10: 5 * time.Second, 63: 5 * time.Second} {
		if got := backoff(n, 100*time.Millisecond, 5*time.Second, top); got != want {
			t.Errorf("backoff(%d) at the top of its range = %s; want %s", n, got, want)
		}
	}
	if got := backoff(3, 100*time.Millisecond, 5*time.Second, func(int64) int64 { return 0 }); got != 0 {
		t.Errorf("full jitter reaches 0, got %s", got)
	}
	for range 1000 {
		if d := backoff(5, 100*time.Millisecond, time.Second, randInt64N); d < 0 || d > time.Second {
			t.Fatalf("backoff out of range: %s", d)
		}
	}
}

func TestRetryBudget(t *testing.T) {
	b := newRetryBudget()
	for i := range 4 {
		b.failure()
		if !b.allow() {
			t.Fatalf("retries denied after %d failures", i+1)
		}
	}
	b.failure()
	if b.allow() {
		t.Fatal("retries still allowed after 5 failures and no success")
	}
	b.success()
	if !b.allow() {
		t.Fatal("a success after the fifth failure did not allow one retry")
	}
	b.failure()
	for range 9 {
		b.success()
	}
	if b.allow() {
		t.Fatal("9 successes earned back a failure; it takes 10")
	}
	b.success()
	if !b.allow() {
		t.Fatal("10 successes did not earn back a failure")
	}
	for range 1000 {
		b.success()
	}
	if b.tenths != budgetMax {
		t.Fatalf("budget grew past its maximum: %d", b.tenths)
	}
}

// A statement timeout PostgreSQL would read as "off" (under a
// millisecond), or one whose batch deadline would overflow, is refused.
func TestStatementTimeoutBounds(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, time.Duration(math.MaxInt64 / 2)} {
		if _, err := New(Config{Name: "bounds", StatementTimeout: d}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "StatementTimeout must be between 1ms and 1h") {
			t.Errorf("StatementTimeout %s: %v", d, err)
		}
	}
}
