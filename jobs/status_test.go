package jobs

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// explaining is a pacer that says why its job is held back.
type explaining struct{ st status.JobStatus }

func (p explaining) Wait(context.Context) (func(int64, time.Duration, error), error) {
	return func(int64, time.Duration, error) {}, nil
}
func (p explaining) Status() status.JobStatus { return p.st }

// A job's status takes its pacer's typed status: state, code, reason,
// binding and rate; a state the jobs package does not know reads running.
func TestStatusTakesThePacersTypedStatus(t *testing.T) {
	held := status.JobStatus{State: status.JobPaused, Code: status.CodeHeld, Reason: "paused: hold h1", Binding: status.Binding{Signal: signals.ReplicaLagSeconds, Labels: map[string]string{signals.LabelReplica: "r1"}}, Rate: 0.5}
	j, err := New(Config{Name: "typed"}, nil, explaining{held}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := j.Status()
	if st.State != StatePaused || st.Code != status.CodeHeld || st.Reason != held.Reason || !st.Binding.Equal(held.Binding) || st.Rate != held.Rate {
		t.Fatalf("status %+v; want the pacer's %+v", st, held)
	}
	j, err = New(Config{Name: "typed"}, nil, explaining{status.JobStatus{State: "unknown"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := j.Status(); st.State != StateRunning {
		t.Fatalf("an unknown state read %q; want running", st.State)
	}
}

// A job's status shows the target its batches adapt toward: the
// configured one, and the floor once a latency signal has held the
// budget long enough.
func TestStatusShowsTheTargetBatchDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &explaining{status.JobStatus{State: status.JobRunning, Code: status.CodeRunning, Rate: 10}}
		j, err := New(Config{Name: "target", TargetBatchDuration: 400 * time.Millisecond}, nil, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st := j.Status(); st.TargetBatchDuration != 400*time.Millisecond {
			t.Fatalf("at start: target %s; want the configured 400ms", st.TargetBatchDuration)
		}
		p.st = status.JobStatus{State: status.JobThrottled, Code: status.CodeHolding, Binding: status.Binding{Signal: signals.ForegroundLatency}, Rate: 10}
		for range 5 {
			tk, err := j.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			tk.Done(1, nil)
		}
		if st := j.Status(); st.TargetBatchDuration != LatencyFloor {
			t.Fatalf("after 5 s held by foreground_latency: target %s; want the floor %s", st.TargetBatchDuration, LatencyFloor)
		}
	})
}
