package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// startPair starts a primary and replica of the test's own, stopped at
// the test's end, and a context that bounds the test to 2 minutes.
func startPair(t *testing.T) (context.Context, *pgcluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return ctx, c
}

// pgconnect connects to dsn and returns a closer.
func pgconnect(ctx context.Context, dsn string) (func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return func() { conn.Close(context.Background()) }, nil
}
