package pgcluster_test

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// pgconnect connects to dsn and returns a closer.
func pgconnect(ctx context.Context, dsn string) (func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return func() { conn.Close(context.Background()) }, nil
}
