package schema

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// CheckWrite refuses, changing nothing, a role that coordination could not
// write schema throttled as: the sampler's pg_monitor role (no CREATE on
// the database), and a role that may create but may not write the
// schema's tables. The owner passes.
func TestCheckWriteNamesTheRoleAndWhatItLacks(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if err := CheckWrite(ctx, admin); err != nil {
		t.Fatalf("the owner: %v", err)
	}
	monitor := pgtest.Connect(t, c.Primary, pgcluster.RoleMonitor)
	err := CheckWrite(ctx, monitor)
	if !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), `role "`+pgcluster.RoleMonitor+`" may not create or change schema throttled (permission denied for database postgres)`) {
		t.Fatalf("the sampler's role: %v", err)
	}
	for _, q := range []string{
		"DROP ROLE IF EXISTS throttled_check_write",
		"CREATE ROLE throttled_check_write",
		"GRANT CREATE ON DATABASE postgres TO throttled_check_write",
		"GRANT USAGE ON SCHEMA throttled TO throttled_check_write",
		"SET ROLE throttled_check_write",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{"RESET ROLE", "DROP OWNED BY throttled_check_write", "DROP ROLE throttled_check_write"} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	err = CheckWrite(ctx, admin)
	if !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), `role "throttled_check_write" may not write throttled.`) {
		t.Fatalf("a role without the tables' privileges: %v", err)
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspowner = 'throttled_check_write'::regrole").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the check left %d schemas of the role's, %v", n, err)
	}
}

// Migrate as a role that may not write says which role, as CheckWrite does.
func TestMigrateNamesTheRoleThatMayNotWrite(t *testing.T) {
	c := pgtest.Cluster(t)
	monitor := pgtest.Connect(t, c.Primary, pgcluster.RoleMonitor)
	_, err := Migrate(context.Background(), monitor)
	if !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), `role "`+pgcluster.RoleMonitor+`" may not create or change schema throttled`) {
		t.Fatalf("Migrate as the sampler's role: %v", err)
	}
}
