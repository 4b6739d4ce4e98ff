package coord_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// A coordination role refused a privilege: workers pause, and say which GRANT.

// coordinatorRole is a non-superuser coordination role made for the tests
// of its privileges: the other coordinated tests coordinate as the
// bootstrap superuser, from whom no privilege can be revoked.
const coordinatorRole = "throttled_coordinator"

// coordinationRole creates coordinatorRole with the privileges coordinated
// mode needs on the pair's throttled schema (migrated first, as the
// superuser) and returns its DSN and a superuser connection. The role and
// its grants are dropped when the test ends, after the test's clients
// have closed.
func coordinationRole(t *testing.T, c *pgcluster.Cluster) (dsn string, admin *pgx.Conn) {
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
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s LOGIN; END IF; END $$`, coordinatorRole),
		fmt.Sprintf("ALTER ROLE %s LOGIN NOSUPERUSER PASSWORD '%s'", coordinatorRole, password),
		// Open migrates: CREATE SCHEMA and TABLE IF NOT EXISTS check the
		// privilege to create before they find the objects there.
		"GRANT CREATE ON DATABASE postgres TO " + coordinatorRole,
		"GRANT USAGE, CREATE ON SCHEMA throttled TO " + coordinatorRole,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA throttled TO " + coordinatorRole,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA throttled TO " + coordinatorRole,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{"DROP OWNED BY " + coordinatorRole, "DROP ROLE " + coordinatorRole} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(c.Primary.DSN(pgcluster.RolePlain))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(coordinatorRole, password)
	return u.String(), admin
}

// A coordination role that loses write access to throttled's tables
// fails closed, and says it is a permission problem. Before, a heartbeat
// refused with SQLSTATE 42501 paused its worker "cannot reach the
// coordination database" and logged nothing; and a leader refused only on
// throttled.leader still renewed every worker's lease (the allocations
// were written by a statement of their own), so the workers ran on while
// the decision a new leader takes over from was never written. Now every
// worker pauses within the lease with a reason naming the missing GRANT,
// the log says the same, and the worker runs again once it is granted.
func TestCoordinationRoleWithoutWriteAccessPausesWorkers(t *testing.T) {
	for _, tc := range []struct {
		name, revoke, grant, table string
	}{
		{"workers", "REVOKE UPDATE ON throttled.workers FROM " + coordinatorRole,
			"GRANT UPDATE ON throttled.workers TO " + coordinatorRole, "throttled.workers"},
		{"leader", "REVOKE INSERT, UPDATE ON throttled.leader FROM " + coordinatorRole,
			"GRANT INSERT, UPDATE ON throttled.leader TO " + coordinatorRole, "throttled.leader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pgtest.Cluster(t)
			dsn, admin := coordinationRole(t, c)
			var logs pgtest.Buffer
			opts := coordinated(t, c, 20)
			opts.CoordinationDSN = dsn
			opts.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
			client, p := runningJob(t, opts, "grant-"+tc.name)
			pgtest.Eventually(t, 10*time.Second, func() error {
				if !client.Leader() {
					return errors.New("the only process does not lead yet")
				}
				return nil
			})
			exec := func(q string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := admin.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			t.Cleanup(func() { exec(tc.grant) })
			exec(tc.revoke)
			revokedAt := time.Now()
			pgtest.Eventually(t, coord.DefaultLease+5*time.Second, func() error {
				if running(p) == nil {
					return errors.New("the worker still runs")
				}
				if _, r, _, _ := p.Explain(); !strings.Contains(r, "GRANT") {
					return fmt.Errorf("paused for %q; want the missing GRANT named", r)
				}
				return nil
			})
			if d := time.Since(revokedAt); d > coord.DefaultLease+time.Second {
				t.Errorf("paused %s after the revoke; want within the lease (%s) and a heartbeat", d, coord.DefaultLease)
			}
			_, reason, _, _ := p.Explain()
			for _, want := range []string{"permission", "42501", tc.table, coordinatorRole} {
				if !strings.Contains(reason, want) {
					t.Errorf("reason %q does not mention %q", reason, want)
				}
			}
			if strings.Contains(reason, "cannot reach") {
				t.Errorf("reason %q blames reachability for a permission problem", reason)
			}
			if u, ok := p.(interface{ Unavailable() bool }); !ok || !u.Unavailable() {
				t.Error("the worker does not report itself unavailable")
			}
			if log := logs.String(); !strings.Contains(log, "GRANT") || !strings.Contains(log, tc.table) {
				t.Errorf("the log does not name the grant on %s:\n%s", tc.table, log)
			}
			exec(tc.grant)
			pgtest.Eventually(t, 15*time.Second, func() error { return running(p) })
		})
	}
}
