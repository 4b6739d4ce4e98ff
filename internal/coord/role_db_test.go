package coord

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// CoordinatorRole is a non-superuser coordination role made for the tests
// of its privileges: the other coordinated tests coordinate as the
// bootstrap superuser, from whom no privilege can be revoked. It and
// NewCoordinatorRole are exported for the package's external tests
// (package coord_test) as well.
const CoordinatorRole = "throttled_coordinator"

// NewCoordinatorRole creates CoordinatorRole with the privileges coordinated
// mode needs on the pair's throttled schema (migrated first, as the
// superuser) and returns its DSN and a superuser connection. The role and
// its grants are dropped when the test ends, after the test's clients
// have closed.
func NewCoordinatorRole(t *testing.T, c *pgcluster.Cluster) (dsn string, admin *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin = pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	password := fmt.Sprintf("coord-%d", time.Now().UnixNano())
	for _, q := range []string{
		fmt.Sprintf(`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s LOGIN; END IF; END $$`, CoordinatorRole),
		fmt.Sprintf("ALTER ROLE %s LOGIN NOSUPERUSER PASSWORD '%s'", CoordinatorRole, password),
		// Open migrates: CREATE SCHEMA and TABLE IF NOT EXISTS check the
		// privilege to create before they find the objects there.
		"GRANT CREATE ON DATABASE postgres TO " + CoordinatorRole,
		"GRANT USAGE, CREATE ON SCHEMA throttled TO " + CoordinatorRole,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA throttled TO " + CoordinatorRole,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA throttled TO " + CoordinatorRole,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{"DROP OWNED BY " + CoordinatorRole, "DROP ROLE " + CoordinatorRole} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(c.Primary.DSN(pgcluster.RolePlain))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(CoordinatorRole, password)
	return u.String(), admin
}
