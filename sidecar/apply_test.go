package sidecar_test

import (
	"context"
	"testing"

	"github.com/throttled/throttled/config"
)

// A reload is applied whole or not at all: when a later job fails,
// Server.Apply removes the jobs it added and gives the ones it changed
// their limits back.
func TestRefusedReloadChangesNothing(t *testing.T) {
	srv, db, _ := coordinatedServer(t)
	ctx := context.Background()
	// The coordination database refuses the new job's worker row (any
	// failure would do: a timeout, a lost connection).
	for _, q := range []string{
		`CREATE OR REPLACE FUNCTION public.refuse_new_worker() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN RAISE EXCEPTION 'refused for the test'; END $$`,
		`DROP TRIGGER IF EXISTS refuse_new_worker ON throttled.workers`,
		`CREATE TRIGGER refuse_new_worker BEFORE INSERT ON throttled.workers FOR EACH ROW
		 WHEN (NEW.job = 'refused-new') EXECUTE FUNCTION public.refuse_new_worker()`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		db.Exec(context.Background(), `DROP TRIGGER IF EXISTS refuse_new_worker ON throttled.workers`)
		db.Exec(context.Background(), `DROP FUNCTION IF EXISTS public.refuse_new_worker()`)
	})
	err := srv.Apply(configWith("v2", config.Job{Name: "a", Weight: 1, MaxRate: 1}, config.Job{Name: "refused-new", Weight: 1}))
	if err == nil {
		t.Fatal("the reload was not refused")
	}
	var maxRate float64
	if err := db.QueryRow(ctx, "SELECT max(max_rate) FROM throttled.workers WHERE job = 'a'").Scan(&maxRate); err != nil {
		t.Fatal(err)
	}
	if maxRate != 10 {
		t.Errorf("after a refused reload (%v), job a's max_rate = %v; want the running configuration's 10", err, maxRate)
	}
}
