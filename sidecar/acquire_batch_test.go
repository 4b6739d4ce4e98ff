package sidecar_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/remote"
)

// A job's min_batch_size, max_batch_size and target_batch_duration in
// the sidecar's configuration reach its remote workers with every token,
// replace the worker's own, and stop applying when a reload drops them.
func TestRemoteWorkersSizeBatchesWithinTheConfiguredBounds(t *testing.T) {
	client, admin := coordinatedClient(t)
	withBounds := func(version string, j config.Job) *config.Config {
		j.Name, j.Weight = "a", 1
		cfg := configWith(version, j)
		cfg.Tokens = []config.Token{{Name: "worker", Secret: workToken, Scopes: []config.Scope{config.ScopeWork}}}
		return cfg
	}
	srv, err := sidecar.New(client, withBounds("v1", config.Job{MinBatchSize: 5, MaxBatchSize: 40, TargetBatchDuration: 2 * time.Second}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	pool, err := pgxpool.New(t.Context(), admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rc, err := remote.New(remote.Config{BaseURL: hs.URL, Token: workToken})
	if err != nil {
		t.Fatal(err)
	}

	// run runs a worker of job a whose own bounds are 1 to maxSize, from
	// 100 rows (within them), for n quick batches, and returns the sizes
	// it was asked for.
	run := func(maxSize, n int) []int {
		t.Helper()
		var sizes []int
		j, err := jobs.New(jobs.Config{Name: "a", InitialBatchSize: min(100, maxSize), MaxBatchSize: maxSize, TargetBatchDuration: time.Second},
			pool, rc.Pacer("a"), func(ctx context.Context, tx pgx.Tx, b jobs.Batch) (jobs.Result, error) {
				sizes = append(sizes, b.Size)
				_, err := tx.Exec(ctx, "SELECT 1")
				return jobs.Result{Rows: int64(b.Size), Done: len(sizes) == n}, err
			})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := j.Run(ctx); err != nil {
			t.Fatalf("run: %v (sizes %v)", err, sizes)
		}
		return sizes
	}

	// The sidecar's max 40 holds from the first batch, against the
	// worker's own 10 000; quick batches grow to it and no further.
	sizes := run(10000, 12)
	if slices.Max(sizes) != 40 || sizes[0] != 40 {
		t.Fatalf("sizes %v with max_batch_size 40; want every one 40 (the first clamped from 100)", sizes)
	}

	// A reload that drops the bounds gives the worker its own back.
	if err := srv.Apply(withBounds("v2", config.Job{})); err != nil {
		t.Fatal(err)
	}
	sizes = run(10000, 12)
	if sizes[0] != 100 || slices.Max(sizes) <= 100 {
		t.Fatalf("sizes %v without configured bounds; want 100 first, then growing past it", sizes)
	}

	// A configured minimum above the worker's own maximum wins.
	if err := srv.Apply(withBounds("v3", config.Job{MinBatchSize: 300})); err != nil {
		t.Fatal(err)
	}
	sizes = run(200, 5)
	for _, s := range sizes {
		if s != 300 {
			t.Fatalf("sizes %v with min_batch_size 300 over the worker's max 200; want 300", fmt.Sprint(sizes))
		}
	}
}
