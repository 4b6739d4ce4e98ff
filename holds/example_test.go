package holds_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/throttle/hold"
)

// Pause a job in every process pacing it, then read what the audit log
// says of it. Migrate needs a role that may write schema throttled; New
// never migrates.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://throttled@db1/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := holds.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	db, err := holds.New(pool, holds.Config{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("purge_sessions"), Source: hold.SourceCLI,
		Reason: "replica rebuild", Actor: "alice", TTL: 30 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	entries, err := db.Audit().Since(ctx, h.Created)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Event, e.HoldID, e.Actor, e.Reason)
	}
}

// Read the holds as a role that may only read schema throttled, such as
// the sampler's pg_monitor role: CheckSchema says whether the schema is
// current, and migrates nothing.
func Example_readOnly() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://monitor@db1/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := holds.CheckSchema(ctx, pool); err != nil {
		log.Fatal(err) // wraps holds.ErrSchemaBehind: run `throttled migrate`
	}
	db, err := holds.New(pool, holds.Config{})
	if err != nil {
		log.Fatal(err)
	}
	active, err := db.Holds().Active(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range active {
		fmt.Println(h.ID, h.Scope, h.Reason)
	}
}
