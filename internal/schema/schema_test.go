package schema

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

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

// Migration binding_labels splits each binding key written before it
// into the signal's name and a labels object, in the leader's decision,
// the critical pause a new leader takes over and each worker's lease; a
// key without labels keeps its name and gets an empty object.
func TestBindingLabelsMigrationSplitsKeys(t *testing.T) {
	c := pgtest.Cluster(t)
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := Migrations()
	i := slices.IndexFunc(all, func(m Migration) bool { return m.Name == "binding_labels" })
	if i < 0 {
		t.Fatal("no migration binding_labels")
	}
	// The database as the version before it left it.
	for _, q := range []string{"DROP SCHEMA IF EXISTS throttled CASCADE", "CREATE SCHEMA throttled",
		"CREATE TABLE throttled.schema_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range all[:i] {
		if _, err := admin.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
		if _, err := admin.Exec(ctx, "INSERT INTO throttled.schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`INSERT INTO throttled.leader (id, leader, budget, mode, binding, critical_signal)
			VALUES (1, 'p', 1, 'critical', 'replica_lag_seconds{replica="r1",zone="a"}', 'replica_lag_bytes{replica="r2"}')`,
		`INSERT INTO throttled.workers (id, job, binding) VALUES ('w/1', 'purge', 'replica_lag_seconds{replica="r1"}'), ('w/2', 'purge', 'primary_load'), ('w/3', 'purge', '')`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := Migrate(ctx, admin)
	if err != nil || len(applied) != len(all)-i || applied[0].Name != "binding_labels" {
		t.Fatalf("migrate: %v applied, %v", applied, err)
	}
	var binding, critical string
	var bLabels, cLabels map[string]string
	if err := admin.QueryRow(ctx, "SELECT binding, binding_labels, critical_signal, critical_labels FROM throttled.leader").
		Scan(&binding, &bLabels, &critical, &cLabels); err != nil {
		t.Fatal(err)
	}
	if binding != "replica_lag_seconds" || !maps.Equal(bLabels, map[string]string{"replica": "r1", "zone": "a"}) ||
		critical != "replica_lag_bytes" || !maps.Equal(cLabels, map[string]string{"replica": "r2"}) {
		t.Errorf("leader: binding %q %v, critical %q %v", binding, bLabels, critical, cLabels)
	}
	want := map[string]struct {
		signal string
		labels map[string]string
	}{"w/1": {"replica_lag_seconds", map[string]string{"replica": "r1"}}, "w/2": {"primary_load", map[string]string{}}, "w/3": {"", map[string]string{}}}
	rows, err := admin.Query(ctx, "SELECT id, binding, binding_labels FROM throttled.workers")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, signal string
		var labels map[string]string
		if err := rows.Scan(&id, &signal, &labels); err != nil {
			t.Fatal(err)
		}
		n++
		if w := want[id]; signal != w.signal || !maps.Equal(labels, w.labels) {
			t.Errorf("worker %s: binding %q %v; want %q %v", id, signal, labels, w.signal, w.labels)
		}
	}
	if n != len(want) {
		t.Errorf("%d workers; want %d", n, len(want))
	}
}
