package jobs_test

import (
	"context"
	"math"
	"testing"

	"github.com/throttled/throttled/jobs"
)

// A job's rows counter (throttled_jobs_rows_total for a process that
// embeds the library) never goes backwards: two batches that each claim
// math.MaxInt64 rows leave it at math.MaxInt64, and a negative count
// changes nothing. On the old code it read -2 after the two.
func TestRowsCounterSaturates(t *testing.T) {
	j, err := jobs.New(jobs.Config{Name: "rows-saturate"}, nil, newFixedPacer(1000, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := func(rows int64) {
		t.Helper()
		tk, err := j.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(rows, nil)
	}
	done(7)
	if got := j.Status().Rows; got != 7 {
		t.Fatalf("rows %d after a batch of 7", got)
	}
	done(math.MaxInt64)
	done(math.MaxInt64)
	if got := j.Status().Rows; got != math.MaxInt64 {
		t.Fatalf("rows %d after two batches of math.MaxInt64; want it held at math.MaxInt64", got)
	}
	done(-5)
	if got, batches := j.Status().Rows, j.Status().Batches; got != math.MaxInt64 || batches != 4 {
		t.Fatalf("rows %d, batches %d after a batch of -5 rows; want math.MaxInt64 and 4", got, batches)
	}
}
