package schema

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS throttled CASCADE"); err != nil {
		t.Fatal(err)
	}
	// Four processes' worth of concurrent migrations: exactly one applies.
	var wg sync.WaitGroup
	counts := make([]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() {
			conn, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close(ctx)
			applied, err := Migrate(ctx, conn)
			counts[i], errs[i] = len(applied), err
		})
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += counts[i]
	}
	if want := len(Migrations()); total != want {
		t.Fatalf("concurrent runs applied %d migrations in all; want %d", total, want)
	}
	if applied, err := Migrate(ctx, admin); err != nil || len(applied) != 0 {
		t.Fatalf("second run applied %v, %v", applied, err)
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM throttled.schema_migrations").Scan(&n); err != nil || n != len(Migrations()) {
		t.Fatalf("%d versions recorded, %v", n, err)
	}
	// A database migrated by a newer throttled is refused, untouched.
	if _, err := admin.Exec(ctx, "INSERT INTO throttled.schema_migrations (version, name) VALUES (9999, 'future')"); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(ctx, "DELETE FROM throttled.schema_migrations WHERE version = 9999")
	if _, err := Migrate(ctx, admin); !errors.Is(err, ErrTooNew) {
		t.Fatalf("newer database: %v", err)
	}
}

func TestMigrationsAreNumberedInOrder(t *testing.T) {
	ms := Migrations()
	for i, m := range ms {
		if m.Version != i+1 || m.Name == "" || m.SQL == "" {
			t.Fatalf("migration %d: %+v", i, m)
		}
	}
}
